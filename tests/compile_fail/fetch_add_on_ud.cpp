// expect: atomic operations (compare-and-swap, fetch-and-add) are available only on RC
// Posting fetch-and-add on a ud queue pair must not compile.
#include "rdmacxx/rdmacxx.hpp"

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::ud, rx::busy_poll>& qp, rx::local_span<std::uint64_t> local,
            rx::remote_span<std::uint64_t> remote) {
    qp.post(rx::fetch_add{local, remote, 1});
}
