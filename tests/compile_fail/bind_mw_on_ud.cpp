// expect: binding a memory window with a work request (bind_mw, type 2) is available only on RC queue pairs
// Posting a type 2 memory window's bind request on a UD queue pair must not compile.
#include "rdmacxx/rdmacxx.hpp"

namespace rx = rdmacxx;

void misuse(rx::queue_pair<rx::ud, rx::busy_poll>& qp, rx::memory_window<2>& mw, rx::memory_region const& mr) {
    qp.post(rx::bind_mw{mw, mr, rx::access::remote_write});
}
