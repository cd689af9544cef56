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

// Spans of const (memory the HCA only reads) send and RDMA WRITE, alone and gathered; a writable
// span converts to one of const.
void use_const(rx::queue_pair<rx::rc, rx::busy_poll>& rc, rx::local_span<std::byte const> ro,
               rx::local_span<std::byte> rw, rx::remote_span<std::byte> remote) {
    rc.post(rx::send{ro}, rx::send_imm{ro, 1}, rx::write{ro, remote}, rx::write_imm{ro, remote, 2});
    rc.post(rx::send{rx::gather(ro, rw)}, rx::write{rx::gather(rw, ro), remote});
    rc.post(rx::read{rx::gather(rw, rw), remote});
    rc.post_recv(rx::recv{rx::gather(rw, rw)});
    rx::local_span<std::byte const> const narrowed = rw.first(8);
    rc.post(rx::send{narrowed});
}

// The fields an extended CQ was created with are read; those always there need none.
void use_extended(rx::completion_queue_ex<rx::busy_poll, rx::wc_fields<rx::wc_field::src_qp>>& cq) {
    (void)cq.poll([](auto const& wc) { (void)(wc.src_qp() + wc.wr_id() + wc.vendor_err() + wc.wc_flags()); });
}

// An extended CQ in a parent domain, alone or on a channel, and a plain CQ's role played by one.
void use_parent_domain(rx::parent_domain const& parent, rx::completion_channel& channel) {
    rx::completion_queue_ex<rx::busy_poll, rx::standard_wc_fields> const polled(parent, 16, {.single_threaded = true});
    rx::completion_queue_ex<rx::event_driven> const shared(parent, 16, channel);
    rx::completion_queue<rx::event_driven> const& plain = shared;
    (void)plain;
}
