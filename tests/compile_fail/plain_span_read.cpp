// expect: a work request needs a local_span (registered memory that carries its lkey), not a plain std::span
// A plain std::span has no lkey: an RDMA READ into one must not compile, and say why in one line.
#include "rdmacxx/rdmacxx.hpp"

#include <span>

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::rc, rx::busy_poll>& qp, std::span<std::uint64_t> result,
            rx::remote_span<std::uint64_t> remote) {
    qp.post(rx::read{result, remote}, rx::fetch_add{result, remote, 1});
}
