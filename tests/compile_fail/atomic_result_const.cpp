// expect: an atomic writes the old value into its result span
// An atomic whose result span is of const (memory the HCA may only read) must not compile.
#include "rdmacxx/rdmacxx.hpp"

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::rc, rx::busy_poll>& qp, rx::local_span<std::uint64_t const> result,
            rx::remote_span<std::uint64_t> remote) {
    qp.post(rx::fetch_add{result, remote, 1});
}
