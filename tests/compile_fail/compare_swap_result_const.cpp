// expect: an atomic writes the old value into its result span
// A compare-and-swap whose result span is of const must not compile.
#include "rdmacxx/rdmacxx.hpp"

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::rc, rx::busy_poll>& qp, rx::local_span<std::uint64_t const> result,
            rx::remote_span<std::uint64_t> remote) {
    qp.post(rx::compare_swap{result, remote, 1, 2});
}
