// expect: compiles
// The legal counterparts of the misuses beside it: they must compile, so that a failure of the
// others is the rule at work, not a broken test.
#include "rdmacxx/rdmacxx.hpp"

namespace rx = rdmacxx;

void use(rx::queue_pair<rx::rc, rx::busy_poll>& rc, rx::queue_pair<rx::uc, rx::busy_poll>& uc,
         rx::queue_pair<rx::ud, rx::busy_poll>& ud, rx::local_span<std::uint64_t> local,
         rx::remote_span<std::uint64_t> remote, rx::address_handle const& ah) {
    rc.post(rx::read{local, remote}, rx::compare_swap{local, remote, 1, 2}, rx::fetch_add{local, remote, 1});
    uc.post(rx::write{local, remote}, rx::write_imm{local, remote, 1}, rx::send{local});
    ud.post(rx::send{local}.to(ah, 1, 2), rx::send_imm{local, 3}.to(ah, 1, 2));
    rc.post_recv(rx::recv{local});
}
