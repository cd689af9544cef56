// The in-flight ledgers of checked queue pairs, without a device: what is recorded, what a
// completion retires, and what a refused post forgets.
#include "rdmacxx/checked.hpp"
#include "rdmacxx/cm/connection.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

namespace rx = rdmacxx;

// A checked CM connection compiles with every member (the CM hands its QP and CQs to the ledger).
template class rdmacxx::cm::connection<rx::rc, rx::checked<rx::event_driven>>;

static_assert(rx::completion_strategy<rx::checked<rx::busy_poll>>);
static_assert(rx::checked<rx::adaptive>::spin == rx::adaptive::spin);
static_assert(rx::detail::tracks_in_flight<rx::checked<rx::busy_poll>>);
static_assert(!rx::detail::tracks_in_flight<rx::busy_poll>);
// Without tracking, the QP and CQ hold nothing more than before: zero bytes of ledger.
static_assert(sizeof(rx::queue_pair<rx::rc, rx::checked<rx::busy_poll>>) ==
              sizeof(rx::queue_pair<rx::rc, rx::busy_poll>) + sizeof(void*));
static_assert(sizeof(rx::completion_queue<rx::checked<rx::busy_poll>>) ==
              sizeof(rx::completion_queue<rx::busy_poll>) + sizeof(std::shared_ptr<int>));

namespace {

// A context pointer the ledgers only use as a key.
ibv_context const* const fake_ctx = reinterpret_cast<ibv_context const*>(std::uintptr_t{0x1000});

ibv_send_wr send_wr(std::uint64_t wr_id, unsigned flags, ibv_sge* sges, int n) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = sges;
    wr.num_sge = n;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = flags;
    return wr;
}

std::uint64_t in_flight(std::uint32_t lkey) { return rx::detail::region_ledger::instance().count(fake_ctx, lkey); }

ibv_wc completion_of(std::uint64_t tag, std::uint32_t qp_num, ibv_wc_status status = IBV_WC_SUCCESS) {
    ibv_wc wc{};
    wc.wr_id = tag;
    wc.qp_num = qp_num;
    wc.status = status;
    return wc;
}

} // namespace

TEST_CASE("checked: a signaled completion retires the unsignaled sends before it and restores the wr_id") {
    rx::detail::qp_ledger ledger(fake_ctx, 17);
    std::array<ibv_sge, 2> a{{{0x10, 8, 0xa1}, {0x20, 8, 0xa1}}}; // two entries of one region: counted once
    std::array<ibv_sge, 2> b{{{0x30, 8, 0xa1}, {0x40, 8, 0xb2}}};
    std::array<ibv_sge, 1> c{{{0x50, 8, 0xc3}}};
    std::array<ibv_send_wr, 3> chain{send_wr(100, 0, a.data(), 2), send_wr(101, 0, b.data(), 2),
                                     send_wr(102, IBV_SEND_SIGNALED, c.data(), 1)};
    std::uint64_t const first = ledger.record(chain.data(), chain.size());
    CHECK(ledger.sends() == 3);
    CHECK(in_flight(0xa1) == 2);
    CHECK(in_flight(0xb2) == 1);
    CHECK(in_flight(0xc3) == 1);
    using ledger_t = rx::detail::qp_ledger;
    CHECK((chain[0].wr_id & ledger_t::seq_mask) == first); // tags, not the user's ids, go to the device
    CHECK((chain[2].wr_id & ledger_t::seq_mask) == first + 2);
    CHECK((chain[0].wr_id & ledger_t::tag_bit) != 0);
    CHECK((chain[0].wr_id & ledger_t::recv_bit) == 0);
    CHECK(ledger.oldest_send_wr_id() == 100);

    // A receive taken from a shared receive queue carries the user's wr_id, which may look like a
    // send tag: its opcode tells it apart, and it is left alone.
    ibv_wc srq_recv = completion_of(chain[1].wr_id, 17);
    srq_recv.opcode = IBV_WC_RECV;
    CHECK(ledger.complete(srq_recv) == rx::detail::qp_ledger::outcome::not_ours);
    CHECK(srq_recv.wr_id == chain[1].wr_id);
    CHECK(ledger.sends() == 3);

    ibv_wc wc = completion_of(chain[2].wr_id, 17);
    CHECK(ledger.complete(wc) == rx::detail::qp_ledger::outcome::completed);
    CHECK(wc.wr_id == 102);
    CHECK(ledger.sends() == 0);
    CHECK(in_flight(0xa1) == 0);
    CHECK(in_flight(0xb2) == 0);
    CHECK(in_flight(0xc3) == 0);
}

TEST_CASE("checked: inline sends hold no region; receives retire one by one, flushed or not") {
    rx::detail::qp_ledger ledger(fake_ctx, 18);
    std::array<ibv_sge, 1> s{{{0x10, 8, 0xd4}}};
    std::array<ibv_send_wr, 1> inl{send_wr(7, IBV_SEND_SIGNALED | IBV_SEND_INLINE, s.data(), 1)};
    (void)ledger.record(inl.data(), 1);
    CHECK(ledger.sends() == 1);
    CHECK(in_flight(0xd4) == 0);

    std::array<ibv_sge, 2> r{{{0x100, 64, 0xe5}, {0x200, 64, 0xe5}}};
    std::array<ibv_recv_wr, 2> recvs{};
    recvs[0] = {1000, &recvs[1], &r[0], 1};
    recvs[1] = {1001, nullptr, &r[1], 1};
    (void)ledger.record(recvs.data(), recvs.size());
    CHECK(ledger.recvs() == 2);
    CHECK(in_flight(0xe5) == 2);
    CHECK((recvs[0].wr_id & rx::detail::qp_ledger::recv_bit) != 0);

    ibv_wc wc = completion_of(recvs[0].wr_id, 18, IBV_WC_WR_FLUSH_ERR); // a flushed receive's opcode is undefined
    (void)ledger.complete(wc);
    CHECK(wc.wr_id == 1000);
    CHECK(ledger.recvs() == 1);
    CHECK(ledger.sends() == 1); // the send queue is untouched by a receive completion
    CHECK(in_flight(0xe5) == 1);

    ibv_wc stale = completion_of(12345, 18); // not a tag of this ledger: left alone
    CHECK(ledger.complete(stale) == rx::detail::qp_ledger::outcome::not_ours);
    CHECK(stale.wr_id == 12345);
    CHECK(ledger.recvs() == 1);
}

TEST_CASE("checked: a refused post forgets the requests from the refused one on") {
    rx::detail::qp_ledger ledger(fake_ctx, 19);
    std::array<ibv_sge, 1> s{{{0x10, 8, 0xf6}}};
    std::array<ibv_send_wr, 4> chain{send_wr(1, 0, s.data(), 1), send_wr(2, 0, s.data(), 1), send_wr(3, 0, s.data(), 1),
                                     send_wr(4, IBV_SEND_SIGNALED, s.data(), 1)};
    std::uint64_t const first = ledger.record(chain.data(), chain.size());
    CHECK(in_flight(0xf6) == 4);
    CHECK(ledger.cancel_sends(first + 2) == 3); // requests 2 and 3 of the chain were not posted
    CHECK(ledger.sends() == 2);
    CHECK(in_flight(0xf6) == 2);
    std::array<ibv_send_wr, 1> next{send_wr(9, IBV_SEND_SIGNALED, s.data(), 1)};
    CHECK(ledger.record(next.data(), 1) == first + 2); // sequence numbers continue without a gap
}

TEST_CASE("checked: a ledger destroyed with work recorded releases its regions") {
    std::array<ibv_sge, 1> s{{{0x10, 8, 0x77}}};
    {
        rx::detail::qp_ledger ledger(fake_ctx, 20);
        std::array<ibv_send_wr, 1> chain{send_wr(1, IBV_SEND_SIGNALED, s.data(), 1)};
        (void)ledger.record(chain.data(), 1);
        CHECK(in_flight(0x77) == 1);
    }
    CHECK(in_flight(0x77) == 0);
}

TEST_CASE("checked: in_flight_error carries the counts and dumps them") {
    rx::in_flight_error const e("QP 5 destroyed", 3, 2);
    CHECK(e.code() == std::errc::device_or_resource_busy);
    CHECK(e.sends() == 3);
    CHECK(e.receives() == 2);
    std::ostringstream out;
    e.dump_detailed(out, "E:", 2);
    CHECK(out.str().find("sends in flight: 3") != std::string::npos);
    auto const old = rx::set_in_flight_handler(nullptr); // nullptr restores the default
    bool const had_handler = old != nullptr;
    CHECK(had_handler);
    bool const restored = rx::set_in_flight_handler(old) == &rx::detail::default_in_flight_handler;
    CHECK(restored);
}

namespace {

// A CQ without a device: ibv_poll_cq(3) is an inline call through the context's ops, which here
// hand out the completions the test queued.
std::deque<ibv_wc> fake_cq_entries;
int fake_poll_cq(ibv_cq*, int n, ibv_wc* out) {
    int k = 0;
    for (; k < n && !fake_cq_entries.empty(); ++k) {
        out[k] = fake_cq_entries.front();
        fake_cq_entries.pop_front();
    }
    return k;
}

std::string reported;
int reports = 0;
void capture_report(rx::in_flight_error const& e) noexcept {
    ++reports;
    reported = e.what();
}

} // namespace

TEST_CASE("checked: a completion older than the oldest on record is the two-thread misuse, reported and dropped") {
    using outcome = rx::detail::qp_ledger::outcome;
    rx::detail::qp_ledger ledger(fake_ctx, 21);
    std::array<ibv_sge, 1> s{{{0x10, 8, 0x88}}};
    // Thread A records request 0 and thread B request 1, but B's post reaches the device first: its
    // completion retires both, and A's completion then arrives for a request no longer on record.
    std::array<ibv_send_wr, 1> a{send_wr(500, IBV_SEND_SIGNALED, s.data(), 1)};
    std::array<ibv_send_wr, 1> b{send_wr(501, IBV_SEND_SIGNALED, s.data(), 1)};
    (void)ledger.record(a.data(), 1);
    (void)ledger.record(b.data(), 1);
    ibv_wc first = completion_of(b[0].wr_id, 21);
    CHECK(ledger.complete(first) == outcome::completed);
    CHECK(first.wr_id == 501);
    ibv_wc late = completion_of(a[0].wr_id, 21);
    std::uint64_t seq = 99, oldest = 99;
    CHECK(ledger.complete(late, &seq, &oldest) == outcome::stale);
    CHECK(seq == 0);
    CHECK(oldest == 2);
    CHECK(late.wr_id == a[0].wr_id); // left as it is: the caller drops it

    // Through the CQ's ledger: the stale completion reaches the handler, never the user.
    ibv_context ctx{};
    ctx.ops.poll_cq = &fake_poll_cq;
    ibv_cq cq{};
    cq.context = &ctx;
    rx::detail::cq_ledger cq_ledger(&cq);
    rx::detail::qp_ledger qp(fake_ctx, 22);
    cq_ledger.attach(&qp);
    std::array<ibv_send_wr, 1> c{send_wr(600, IBV_SEND_SIGNALED, s.data(), 1)};
    std::array<ibv_send_wr, 1> d{send_wr(601, IBV_SEND_SIGNALED, s.data(), 1)};
    std::array<ibv_send_wr, 1> e{send_wr(602, IBV_SEND_SIGNALED, s.data(), 1)};
    (void)qp.record(c.data(), 1);
    (void)qp.record(d.data(), 1);
    (void)qp.record(e.data(), 1);
    fake_cq_entries = {completion_of(d[0].wr_id, 22), completion_of(c[0].wr_id, 22), completion_of(e[0].wr_id, 22)};
    reports = 0;
    auto const old = rx::set_in_flight_handler(&capture_report);
    std::array<ibv_wc, 4> out{};
    int const n = cq_ledger.poll(out.data(), static_cast<int>(out.size()));
    (void)rx::set_in_flight_handler(old);
    REQUIRE(n == 2);
    CHECK(out[0].wr_id == 601);
    CHECK(out[1].wr_id == 602); // no internal tag leaks out as a wr_id
    CHECK(reports == 1);
    CHECK(reported.find("checked QP 22: a completion arrived for send request #0, older than the oldest on record "
                        "(#2): requests were posted to this QP from two threads at once without a lock") !=
          std::string::npos);
    CHECK(qp.sends() == 0);

    // A poll whose every completion is dropped looks again rather than report none while more wait.
    std::array<ibv_send_wr, 1> f{send_wr(603, IBV_SEND_SIGNALED, s.data(), 1)};
    std::array<ibv_send_wr, 1> g{send_wr(604, IBV_SEND_SIGNALED, s.data(), 1)};
    std::array<ibv_send_wr, 1> h{send_wr(605, IBV_SEND_SIGNALED, s.data(), 1)};
    (void)qp.record(f.data(), 1); // #3
    (void)qp.record(g.data(), 1); // #4
    (void)qp.record(h.data(), 1); // #5
    fake_cq_entries = {completion_of(g[0].wr_id, 22), completion_of(f[0].wr_id, 22), completion_of(h[0].wr_id, 22)};
    (void)rx::set_in_flight_handler(&capture_report);
    int const n1 = cq_ledger.poll(out.data(), 1);
    std::uint64_t const id1 = out[0].wr_id;
    int const n2 = cq_ledger.poll(out.data(), 1); // #3 is stale and dropped: #5 comes in its place
    (void)rx::set_in_flight_handler(old);
    CHECK(n1 == 1);
    CHECK(id1 == 604);
    CHECK(n2 == 1);
    CHECK(out[0].wr_id == 605);
    CHECK(reports == 2);
    CHECK(fake_cq_entries.empty());
    cq_ledger.detach(&qp);
}

TEST_CASE("checked: completions of requests a reset forgot are dropped quietly, not reported") {
    using outcome = rx::detail::qp_ledger::outcome;
    rx::detail::qp_ledger ledger(fake_ctx, 23);
    std::array<ibv_sge, 1> s{{{0x10, 8, 0x99}}};
    std::array<ibv_send_wr, 1> a{send_wr(1, IBV_SEND_SIGNALED, s.data(), 1)};
    (void)ledger.record(a.data(), 1);
    ledger.forget_all();
    CHECK(in_flight(0x99) == 0);
    ibv_wc wc = completion_of(a[0].wr_id, 23, IBV_WC_WR_FLUSH_ERR);
    CHECK(ledger.complete(wc) == outcome::forgotten);
}

TEST_CASE("checked: a failed completion's request is noted: queue, operation, remote address, rkey") {
    rx::detail::qp_ledger ledger(fake_ctx, 24);
    std::array<ibv_sge, 1> s{{{0x10, 8, 0xaa}}};
    ibv_send_wr w = send_wr(700, IBV_SEND_SIGNALED, s.data(), 1);
    w.opcode = IBV_WR_RDMA_READ;
    w.wr.rdma.remote_addr = 0x7fff0000a000;
    w.wr.rdma.rkey = 0x4321;
    (void)ledger.record(&w, 1);
    ibv_wc wc = completion_of(w.wr_id, 24, IBV_WC_REM_ACCESS_ERR);
    wc.vendor_err = 0x77;
    CHECK(ledger.complete(wc) == rx::detail::qp_ledger::outcome::completed);
    CHECK(wc.wr_id == 700);
    rx::wc_error const e = rx::detail::failed_completion_error(wc);
    CHECK(e.side() == rx::completion_side::send);
    CHECK(e.request().opcode == IBV_WR_RDMA_READ);
    CHECK(e.request().remote_address == 0x7fff0000a000);
    CHECK(e.request().rkey == 0x4321);
    CHECK(std::string{e.what()}.find("RDMA READ of remote address 0x7fff0000a000 with rkey 0x4321") !=
          std::string::npos);

    // A failed receive is noted as a receive; an unknown completion stays unknown.
    std::array<ibv_recv_wr, 1> r{};
    r[0] = {800, nullptr, s.data(), 1};
    (void)ledger.record(r.data(), 1);
    ibv_wc rwc = completion_of(r[0].wr_id, 24, IBV_WC_WR_FLUSH_ERR);
    (void)ledger.complete(rwc);
    CHECK(rx::detail::failed_completion_error(rwc).side() == rx::completion_side::receive);
    ibv_wc other = completion_of(900, 25, IBV_WC_WR_FLUSH_ERR);
    CHECK(rx::detail::failed_completion_error(other).side() == rx::completion_side::unknown);
}
