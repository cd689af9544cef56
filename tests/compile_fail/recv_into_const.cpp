// expect: a receive writes into its buffer
// A receive into a span of const (memory the HCA may only read) must not compile.
#include "rdmacxx/rdmacxx.hpp"

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::rc, rx::busy_poll>& qp, rx::local_span<std::byte const> buffer) {
    qp.post_recv(rx::recv{buffer});
}
