// expect: a work request needs a local_span (registered memory that carries its lkey), not a plain std::span
// A plain std::span has no lkey: a send of one must not compile, and say why in one line.
#include "rdmacxx/rdmacxx.hpp"

#include <span>
#include <vector>

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::rc, rx::busy_poll>& qp, std::vector<std::byte>& buffer) {
    qp.post(rx::send{std::span{buffer}});
}
