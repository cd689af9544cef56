// expect: an RDMA READ writes into its local span
// An RDMA READ into a span of const (memory the HCA may only read) must not compile.
#include "rdmacxx/rdmacxx.hpp"

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::rc, rx::busy_poll>& qp, rx::local_span<std::byte const> local,
            rx::remote_span<std::byte> remote) {
    qp.post(rx::read{local, remote});
}
