// expect: a work request needs a local_span (registered memory that carries its lkey), not a plain std::span
// A plain std::span has no lkey: a receive into one must not compile, and say why in one line.
#include "rdmacxx/rdmacxx.hpp"

#include <span>

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::rc, rx::busy_poll>& qp, std::span<std::byte> buffer) { qp.post_recv(rx::recv{buffer}); }
