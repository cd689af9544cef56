// expect: an RDMA READ writes into its local span
// An RDMA READ scattered into a list that holds a span of const must not compile.
#include "rdmacxx/rdmacxx.hpp"

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::rc, rx::busy_poll>& qp, rx::local_span<std::byte> a, rx::local_span<std::byte const> b,
            rx::remote_span<std::byte> remote) {
    qp.post(rx::read{rx::gather(a, b), remote});
}
