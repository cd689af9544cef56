// expect: post() takes send-queue work requests; give receive requests to post_recv()
// Posting a receive request on a rc queue pair must not compile.
#include "rdmacxx/rdmacxx.hpp"

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::rc, rx::busy_poll>& qp, rx::local_span<std::uint64_t> local,
            rx::remote_span<std::uint64_t> remote) {
    qp.post(rx::recv{local});
}
