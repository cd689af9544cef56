// expect: RDMA WRITE is not available on UD queue pairs
// Posting RDMA WRITE with immediate on a ud queue pair must not compile.
#include "rdmacxx/rdmacxx.hpp"

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::ud, rx::busy_poll>& qp, rx::local_span<std::uint64_t> local,
            rx::remote_span<std::uint64_t> remote) {
    qp.post(rx::write_imm{local, remote, 1});
}
