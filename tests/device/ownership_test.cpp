// The ownership model (docs/ownership.md) on a real device: every kind of object is built, then
// moved to a new address (the old one freed: under ASan a stale pointer to it is an error), then
// move-assigned into a live object of its kind (which tears the live one down first), and after
// each step everything is used again: work posted and completed through every QP, stream,
// window and connection. A child that kept a raw pointer or reference to a parent that moved
// reads freed memory here. The Asio dispatcher is covered in asio_test.cpp, the peer group in
// mpi/peer_group_test.cpp.

#include "rdmacxx/bootstrap/peer_group.hpp"
#include "rdmacxx/checked.hpp"
#include "rdmacxx/rdmacxx.hpp"

#include "fixture.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;

// The model's compile-time half: what would lose track of its parts does not compile.
static_assert(!std::is_constructible_v<rx::protection_domain, rx::parent_domain&&>,
              "moving a parent domain into a plain protection domain would forget its PD and TD");
static_assert(!std::is_assignable_v<rx::protection_domain&, rx::parent_domain&&>);
static_assert(std::is_nothrow_move_constructible_v<rx::parent_domain> &&
              std::is_nothrow_move_assignable_v<rx::parent_domain>);
static_assert(std::is_nothrow_move_constructible_v<rx::thread_domain> &&
              std::is_nothrow_move_assignable_v<rx::thread_domain>);
static_assert(std::is_nothrow_move_constructible_v<rx::queue_pair<rx::ud, rx::checked<rx::event_driven>>> &&
              std::is_nothrow_move_assignable_v<rx::queue_pair<rx::ud, rx::checked<rx::event_driven>>>);
static_assert(std::is_nothrow_move_assignable_v<cm::connection<rx::rc, rx::busy_poll>>);
static_assert(std::is_nothrow_move_assignable_v<cm::multicast_group<rx::event_driven>>);
static_assert(std::is_nothrow_move_assignable_v<rx::peer_group<rx::busy_poll>>);

// Helpers in a namespace of their own: unity builds put several test files in one translation
// unit, where anonymous namespaces merge.
namespace ownership_test {

using test::wait_ok;

/// Moves `*p` into a new heap object and frees the old one.
template <class T>
void relocate(std::unique_ptr<T>& p) {
    auto const* const before = p.get();
    p = std::make_unique<T>(std::move(*p));
    REQUIRE(p.get() != before);
}

/// Move-assigns `*p` into `live`, a live object of its kind (which tears down what it held),
/// which then takes `*p`'s place; the old object is freed.
template <class T>
void assign_into(std::unique_ptr<T>& p, std::unique_ptr<T> live) {
    REQUIRE(live);
    *live = std::move(*p);
    p = std::move(live);
}

/// The successful completions `want` ({QP number, wr_id}) from `cq`, in any order, skipping the
/// flushed completions of QPs torn down on a shared CQ (a borrowed CQ keeps them for its poller).
template <class Completion>
std::vector<rx::work_completion> take(rx::completion_queue<Completion>& cq,
                                      std::vector<std::pair<std::uint32_t, std::uint64_t>> want) {
    std::vector<rx::work_completion> got;
    for (int seen = 0; !want.empty() && seen < 64; ++seen) {
        auto wc = test::next_completion(cq, 20s);
        auto const it = std::find_if(want.begin(), want.end(),
                                     [&](auto const& w) { return w.first == wc.qp_num() && w.second == wc.wr_id(); });
        if (it == want.end() && wc.status() == IBV_WC_WR_FLUSH_ERR) continue;
        REQUIRE_MESSAGE(it != want.end(), "an unexpected completion: QP " << wc.qp_num() << ", wr_id " << wc.wr_id());
        wc.throw_if_error();
        want.erase(it);
        got.push_back(wc);
    }
    REQUIRE_MESSAGE(want.empty(), want.size() << " completions missing after 64");
    return got;
}

/// Completes a send of `a` (wr_id `sent`) on `a_cq` and a receive of `b` (wr_id `received`) on
/// `b_cq`, which may be one CQ; returns the receive's completion.
template <class QpA, class CqA, class QpB, class CqB>
rx::work_completion complete_pair(QpA& a, CqA& a_cq, std::uint64_t sent, QpB& b, CqB& b_cq, std::uint64_t received) {
    if constexpr (std::is_same_v<CqA, CqB>) {
        if (&a_cq == &b_cq) {
            for (auto const& wc : take(a_cq, {{a.qp_num(), sent}, {b.qp_num(), received}}))
                if (wc.is_recv()) return wc;
            FAIL("no receive completion");
        }
    }
    (void)take(a_cq, {{a.qp_num(), sent}});
    return take(b_cq, {{b.qp_num(), received}}).front();
}

/// A SEND of 64 bytes from `a` into a receive posted on `b` (or on `srq`), both completions
/// taken from their CQs.
template <class QpA, class CqA, class QpB, class CqB>
void ping(QpA& a, CqA& a_cq, QpB& b, CqB& b_cq, rx::local_span<std::byte> out, rx::local_span<std::byte> in,
          rx::shared_receive_queue* srq = nullptr) {
    test::fill_pattern(std::span{out.data(), out.size()}, 9);
    if (srq != nullptr)
        srq->post_recv(rx::recv{in.first(64)}.id(22));
    else
        b.post_recv(rx::recv{in.first(64)}.id(22));
    a.post(rx::send{out.first(64)}.id(11));
    auto const got = complete_pair(a, a_cq, 11, b, b_cq, 22);
    CHECK(got.byte_len() == 64);
    CHECK(std::equal(out.begin(), out.begin() + 64, in.begin()));
}

/// As `ping`, for a UD pair: addressed through `ah`, received behind the 40-byte GRH.
template <class QpA, class CqA, class QpB, class CqB>
void ping_ud(QpA& a, CqA& a_cq, QpB& b, CqB& b_cq, rx::address_handle const& ah, rx::local_span<std::byte> out,
             rx::local_span<std::byte> in) {
    test::fill_pattern(std::span{out.data(), out.size()}, 4);
    b.post_recv(rx::recv{in.first(rx::ud::grh_bytes + 64)}.id(33));
    a.post(rx::send{out.first(64)}.to(ah, b.qp_num(), rx::default_qkey).id(44));
    (void)complete_pair(a, a_cq, 44, b, b_cq, 33);
    CHECK(std::equal(out.begin(), out.begin() + 64, in.begin() + rx::ud::grh_bytes));
}

template <class Qp>
void connect_pair(Qp& a, Qp& b, rx::end_port const& port) {
    a.connect(port, b.local_endpoint(port), {.remote_access = rx::all_remote});
    b.connect(port, a.local_endpoint(port), {.remote_access = rx::all_remote});
}

using xfields = rx::wc_fields<rx::wc_field::byte_len, rx::wc_field::qp_num>;
template <class T, class C, class P = rx::legacy_post>
using qp_ptr = std::unique_ptr<rx::queue_pair<T, C, P>>;
using stream_type = rx::selective_signaling<rx::queue_pair<rx::rc, rx::busy_poll>>;

/// Every kind of verbs object, each on the heap so that it can be moved away and freed.
struct verbs_objects {
    std::unique_ptr<rx::context> ctx = std::make_unique<rx::context>(test::open_test_device());
    std::string device{ctx->name()};
    std::unique_ptr<rx::end_port> port = std::make_unique<rx::end_port>(*ctx);
    std::unique_ptr<rx::opened_end_port> opened = std::make_unique<rx::opened_end_port>(rx::get_end_port(device));
    std::unique_ptr<rx::protection_domain> pd = std::make_unique<rx::protection_domain>(*ctx);
    std::unique_ptr<rx::thread_domain> td;     // null: the device has none (rxe)
    std::unique_ptr<rx::parent_domain> parent; // null: the device has none (rxe)
    std::unique_ptr<rx::completion_channel> channel = std::make_unique<rx::completion_channel>(*ctx);
    std::unique_ptr<rx::completion_queue<rx::busy_poll>> cq =
        std::make_unique<rx::completion_queue<rx::busy_poll>>(*ctx, 1024);
    std::unique_ptr<rx::completion_queue<rx::event_driven>> ecq =
        std::make_unique<rx::completion_queue<rx::event_driven>>(*ctx, 64, *channel); // on a shared channel
    std::unique_ptr<rx::completion_queue<rx::adaptive>> acq =
        std::make_unique<rx::completion_queue<rx::adaptive>>(*ctx, 64); // its own channel
    std::unique_ptr<rx::completion_queue<rx::checked<rx::busy_poll>>> ccq =
        std::make_unique<rx::completion_queue<rx::checked<rx::busy_poll>>>(*ctx, 64);
    std::unique_ptr<rx::completion_queue_ex<rx::busy_poll, xfields>> xcq =
        std::make_unique<rx::completion_queue_ex<rx::busy_poll, xfields>>(*ctx, 64);
    std::unique_ptr<rx::shared_receive_queue> srq = std::make_unique<rx::shared_receive_queue>(*pd, 16);
    std::vector<std::byte> bytes = std::vector<std::byte>(1 << 16);
    std::unique_ptr<rx::memory_region> mr = std::make_unique<rx::memory_region>(
        pd->register_memory(std::span{bytes}, rx::all_remote | rx::access::local_write | rx::access::mw_bind));
    std::unique_ptr<rx::memory_window<1>> mw1 = std::make_unique<rx::memory_window<1>>(*pd);
    std::unique_ptr<rx::memory_window<2>> mw2 = std::make_unique<rx::memory_window<2>>(*pd);

    // A pair of QPs of every transport and post policy, checked and not, and one on the SRQ.
    qp_ptr<rx::rc, rx::busy_poll> rc_a = make<rx::rc, rx::busy_poll>(*cq), rc_b = make<rx::rc, rx::busy_poll>(*cq);
    qp_ptr<rx::rc, rx::busy_poll, rx::extended_post> rcx_a = make<rx::rc, rx::busy_poll, rx::extended_post>(*cq),
                                                     rcx_b = make<rx::rc, rx::busy_poll, rx::extended_post>(*cq);
    qp_ptr<rx::uc, rx::event_driven> uc_a = make<rx::uc, rx::event_driven>(*ecq),
                                     uc_b = make<rx::uc, rx::event_driven>(*ecq);
    qp_ptr<rx::uc, rx::adaptive, rx::extended_post> ucx_a = make<rx::uc, rx::adaptive, rx::extended_post>(*acq),
                                                    ucx_b = make<rx::uc, rx::adaptive, rx::extended_post>(*acq);
    qp_ptr<rx::ud, rx::busy_poll> ud_a = make<rx::ud, rx::busy_poll>(*cq), ud_b = make<rx::ud, rx::busy_poll>(*cq);
    qp_ptr<rx::ud, rx::busy_poll, rx::extended_post> udx_a = make<rx::ud, rx::busy_poll, rx::extended_post>(*xcq),
                                                     udx_b = make<rx::ud, rx::busy_poll, rx::extended_post>(*xcq);
    qp_ptr<rx::rc, rx::checked<rx::busy_poll>> chk_a = make<rx::rc, rx::checked<rx::busy_poll>>(*ccq),
                                               chk_b = make<rx::rc, rx::checked<rx::busy_poll>>(*ccq);
    qp_ptr<rx::rc, rx::checked<rx::busy_poll>, rx::extended_post>
        chkx_a = make<rx::rc, rx::checked<rx::busy_poll>, rx::extended_post>(*ccq),
        chkx_b = make<rx::rc, rx::checked<rx::busy_poll>, rx::extended_post>(*ccq);
    qp_ptr<rx::rc, rx::busy_poll> srq_a = make<rx::rc, rx::busy_poll>(*cq),
                                  srq_b = std::make_unique<rx::queue_pair<rx::rc, rx::busy_poll>>(*pd, *cq, *cq, *srq);
    std::unique_ptr<rx::address_handle> ah;
    std::unique_ptr<stream_type> stream;
    rx::remote_span<std::byte> window1, window2;

    template <class T, class C, class P = rx::legacy_post, class Cq>
    qp_ptr<T, C, P> make(Cq& on) {
        return std::make_unique<rx::queue_pair<T, C, P>>(*pd, on, on, rx::qp_capabilities{.max_inline_data = 64});
    }

    verbs_objects() {
        try {
            td = std::make_unique<rx::thread_domain>(*ctx);
            parent = std::make_unique<rx::parent_domain>(*pd, *td);
        } catch (rx::not_supported_error const& e) {
            MESSAGE("no thread or parent domains on " << device << " (" << std::string{e.what()}
                                                      << "): their moves are checked at compile time only");
        }
        connect_pair(*rc_a, *rc_b, *port);
        connect_pair(*rcx_a, *rcx_b, *port);
        connect_pair(*uc_a, *uc_b, *port);
        connect_pair(*ucx_a, *ucx_b, *port);
        connect_pair(*chk_a, *chk_b, *port);
        connect_pair(*chkx_a, *chkx_b, *port);
        connect_pair(*srq_a, *srq_b, *port);
        for (auto* q : {ud_a.get(), ud_b.get()})
            q->activate(*port);
        udx_a->activate(*port);
        udx_b->activate(*port);
        ah = std::make_unique<rx::address_handle>(*pd, *port, port->lid(), port->gid().gid);
        stream = std::make_unique<stream_type>(*rc_a, *cq, 4);
        constexpr rx::access read_write = rx::access::remote_read | rx::access::remote_write;
        window1 = mw1->bind(*rc_a, *mr, 40960, 1024, read_write, 7);
        (void)take(*cq, {{rc_a->qp_num(), 7}});
        rc_a->post(rx::bind_mw{*mw2, *mr, 45056, 1024, read_write}.id(8));
        (void)take(*cq, {{rc_a->qp_num(), 8}});
        window2 = mw2->remote();
    }

    [[nodiscard]] rx::local_span<std::byte> slot(std::size_t i) const { return mr->span().subspan(i * 2048, 2048); }

    // Posts and completes work through every object, and checks that every child names its parent
    // where it is now.
    void use(std::string const& when) {
        CAPTURE(when);
        CHECK(&pd->context() == ctx.get());
        CHECK(&cq->context() == ctx.get());
        CHECK(&xcq->context() == ctx.get());
        CHECK(&port->context() == ctx.get());
        CHECK(port->to_string() == device + "/1");
        CHECK(&opened->port().context() == &opened->context());
        CHECK(opened->to_string() == device + "/1");
        CHECK(&rc_a->pd() == pd.get());
        CHECK(&chkx_b->pd() == pd.get());
        CHECK(&mw1->pd() == pd.get());
        if (parent) {
            CHECK(&parent->pd() == pd.get());
            CHECK(parent->td() == td.get());
            CHECK(&td->context() == ctx.get());
            rx::completion_queue_ex<rx::busy_poll> pcq{*parent, 16};
            rx::queue_pair<rx::rc, rx::busy_poll> pa{*parent, pcq, pcq}, pb{*parent, pcq, pcq};
            connect_pair(pa, pb, *port);
            ping(pa, pcq, pb, pcq, slot(30), slot(31));
        }
        ping(*rc_a, *cq, *rc_b, *cq, slot(0), slot(1));
        ping(*rcx_a, *cq, *rcx_b, *cq, slot(2), slot(3));
        ping(*uc_a, *ecq, *uc_b, *ecq, slot(4), slot(5));
        ping(*ucx_a, *acq, *ucx_b, *acq, slot(6), slot(7));
        ping_ud(*ud_a, *cq, *ud_b, *cq, *ah, slot(8), slot(9));
        ping_ud(*udx_a, *xcq, *udx_b, *xcq, *ah, slot(10), slot(11));
        ping(*chk_a, *ccq, *chk_b, *ccq, slot(12), slot(13));
        ping(*chkx_a, *ccq, *chkx_b, *ccq, slot(14), slot(15));
        CHECK(chk_a->in_flight_sends() == 0);
        CHECK(chkx_b->in_flight_recvs() == 0);
        ping(*srq_a, *cq, *srq_b, *cq, slot(16), slot(17), srq.get());
        // The stream posts through its QP and waits on its CQ, wherever they are.
        for (int i = 0; i < 8; ++i)
            stream->post(rx::write{slot(18).first(64), mr->remote().subspan(19 * 2048, 64)}, i == 7);
        stream->finish();
        CHECK(std::equal(slot(18).begin(), slot(18).begin() + 64, slot(19).begin()));
        // A peer writes through both windows.
        test::fill_pattern(std::span{slot(24).data(), 128}, 2);
        rc_b->post(rx::write{slot(24).first(128), window1.first(128)}.id(61),
                   rx::write{slot(24).first(128), window2.first(128)}.id(62));
        (void)take(*cq, {{rc_b->qp_num(), 61}, {rc_b->qp_num(), 62}});
        CHECK(std::equal(slot(24).begin(), slot(24).begin() + 128, slot(20).begin()));
        CHECK(std::equal(slot(24).begin(), slot(24).begin() + 128, slot(22).begin()));
        CHECK(mw1->remote().rkey() == window1.rkey());
        // New children on parents that have moved.
        rx::protection_domain fresh{*ctx};
        rx::completion_queue<rx::busy_poll> fresh_cq{*ctx, 16};
        rx::queue_pair<rx::rc, rx::busy_poll> fa{*pd, fresh_cq, fresh_cq}, fb{*pd, fresh_cq, fresh_cq};
        connect_pair(fa, fb, *port);
        ping(fa, fresh_cq, fb, fresh_cq, slot(26), slot(27));
        (void)fresh;
    }

    // Every object to a new address, the old one freed.
    void relocate_all() {
        relocate(ctx);
        relocate(port);
        relocate(opened);
        relocate(pd);
        if (td) relocate(td);
        if (parent) relocate(parent);
        relocate(channel);
        relocate(cq);
        relocate(ecq);
        relocate(acq);
        relocate(ccq);
        relocate(xcq);
        relocate(srq);
        relocate(mr);
        relocate(mw1);
        relocate(mw2);
        relocate(rc_a), relocate(rc_b), relocate(rcx_a), relocate(rcx_b);
        relocate(uc_a), relocate(uc_b), relocate(ucx_a), relocate(ucx_b);
        relocate(ud_a), relocate(ud_b), relocate(udx_a), relocate(udx_b);
        relocate(chk_a), relocate(chk_b), relocate(chkx_a), relocate(chkx_b);
        relocate(srq_a), relocate(srq_b);
        relocate(ah);
        relocate(stream);
    }

    // Every object move-assigned into a live one of its kind, made for the purpose (the live
    // one's own handle is released first).
    void assign_all() {
        assign_into(ctx, std::make_unique<rx::context>(test::open_test_device()));
        assign_into(port, std::make_unique<rx::end_port>(*ctx));
        assign_into(opened, std::make_unique<rx::opened_end_port>(rx::get_end_port(device)));
        assign_into(pd, std::make_unique<rx::protection_domain>(*ctx));
        if (td) assign_into(td, std::make_unique<rx::thread_domain>(*ctx));
        if (parent) assign_into(parent, std::make_unique<rx::parent_domain>(*pd));
        assign_into(channel, std::make_unique<rx::completion_channel>(*ctx));
        assign_into(cq, std::make_unique<rx::completion_queue<rx::busy_poll>>(*ctx, 16));
        assign_into(ecq, std::make_unique<rx::completion_queue<rx::event_driven>>(*ctx, 16, *channel));
        assign_into(acq, std::make_unique<rx::completion_queue<rx::adaptive>>(*ctx, 16));
        assign_into(ccq, std::make_unique<rx::completion_queue<rx::checked<rx::busy_poll>>>(*ctx, 16));
        assign_into(xcq, std::make_unique<rx::completion_queue_ex<rx::busy_poll, xfields>>(*ctx, 16));
        assign_into(srq, std::make_unique<rx::shared_receive_queue>(*pd, 4));
        std::vector<std::byte> other(4096);
        assign_into(
            mr, std::make_unique<rx::memory_region>(pd->register_memory(std::span{other}, rx::access::local_write)));
        assign_into(mw1, std::make_unique<rx::memory_window<1>>(*pd));
        assign_into(mw2, std::make_unique<rx::memory_window<2>>(*pd));
        assign_into(rc_a, make<rx::rc, rx::busy_poll>(*cq)), assign_into(rc_b, make<rx::rc, rx::busy_poll>(*cq));
        assign_into(rcx_a, make<rx::rc, rx::busy_poll, rx::extended_post>(*cq));
        assign_into(rcx_b, make<rx::rc, rx::busy_poll, rx::extended_post>(*cq));
        assign_into(uc_a, make<rx::uc, rx::event_driven>(*ecq)),
            assign_into(uc_b, make<rx::uc, rx::event_driven>(*ecq));
        assign_into(ucx_a, make<rx::uc, rx::adaptive, rx::extended_post>(*acq));
        assign_into(ucx_b, make<rx::uc, rx::adaptive, rx::extended_post>(*acq));
        assign_into(ud_a, make<rx::ud, rx::busy_poll>(*cq)), assign_into(ud_b, make<rx::ud, rx::busy_poll>(*cq));
        assign_into(udx_a, make<rx::ud, rx::busy_poll, rx::extended_post>(*xcq));
        assign_into(udx_b, make<rx::ud, rx::busy_poll, rx::extended_post>(*xcq));
        assign_into(chk_a, make<rx::rc, rx::checked<rx::busy_poll>>(*ccq));
        assign_into(chk_b, make<rx::rc, rx::checked<rx::busy_poll>>(*ccq));
        assign_into(chkx_a, make<rx::rc, rx::checked<rx::busy_poll>, rx::extended_post>(*ccq));
        assign_into(chkx_b, make<rx::rc, rx::checked<rx::busy_poll>, rx::extended_post>(*ccq));
        assign_into(srq_a, make<rx::rc, rx::busy_poll>(*cq));
        assign_into(srq_b, std::make_unique<rx::queue_pair<rx::rc, rx::busy_poll>>(*pd, *cq, *cq, *srq));
        assign_into(ah, std::make_unique<rx::address_handle>(*pd, *port, port->lid(), port->gid().gid));
        // A live stream over another QP of its type, which finishes nothing: it is replaced.
        assign_into(stream, std::make_unique<stream_type>(*rc_b, *cq, 2));
    }
};

} // namespace ownership_test

TEST_CASE("ownership: every verbs object moves and is move-assigned into a live one of its kind under its "
          "children, and all of them still work") {
    using namespace ownership_test;
    verbs_objects all;
    all.use("as made");
    all.relocate_all();
    all.use("after every object moved to a new address");
    all.relocate_all(); // the spares made below go on the device the moved context holds
    all.assign_all();
    all.use("after every object was move-assigned into a live one");
    all.relocate_all();
    all.use("after every object moved again");
}

TEST_CASE("ownership: a child used after its parent is gone throws orphaned_error instead of reading freed memory") {
    auto ctx = std::make_unique<rx::context>(test::open_test_device());
    auto pd = std::make_unique<rx::protection_domain>(*ctx);
    auto cq = std::make_unique<rx::completion_queue<rx::busy_poll>>(*ctx, 16);
    auto qp = std::make_unique<rx::queue_pair<rx::rc, rx::busy_poll>>(*pd, *cq, *cq);
    rx::selective_signaling stream{*qp, *cq, 1};
    rx::end_port port{*ctx};
    // The QP is replaced by another: the stream's QP is gone.
    *qp = rx::queue_pair<rx::rc, rx::busy_poll>{*pd, *cq, *cq};
    CHECK_THROWS_AS(stream.post(rx::send{rx::local_span<std::byte>{}}), rx::orphaned_error);
    try {
        stream.post(rx::send{rx::local_span<std::byte>{}});
    } catch (rx::orphaned_error const& e) {
        CHECK(e.code() == std::errc::owner_dead);
        CHECK(std::string{e.what()}.find("queue pair") != std::string::npos);
    }
    qp.reset();
    cq.reset();
    pd.reset();
    // The context goes while an end port made from it is kept.
    rx::context other = test::open_test_device();
    *ctx = std::move(other);
    CHECK_THROWS_AS((void)port.context(), rx::orphaned_error);
}

TEST_CASE("ownership: CM listeners, connections on own, shared and user resources, and multicast groups move and "
          "are move-assigned into live ones, and all of them still work") {
    using namespace ownership_test;
    using own_connection = cm::connection<rx::rc, rx::busy_poll>;
    using shared_connection = cm::connection<rx::rc, rx::event_driven>;
    using user_qp = rx::queue_pair<rx::rc, rx::busy_poll>;
    using user_connection = cm::connection<rx::rc, rx::busy_poll>;

    auto listener = std::make_unique<cm::listener<rx::rc>>(test::device_address());
    relocate(listener);
    std::uint16_t const port = listener->port();
    assign_into(listener, std::make_unique<cm::listener<rx::rc>>(test::device_address()));
    CHECK(listener->port() == port);
    rx::context& ctx = listener->cm_id().context();

    // A server's shared resources, and QPs of the user's, on the listener's device.
    auto shared_pd = std::make_unique<rx::protection_domain>(ctx);
    auto shared_channel = std::make_unique<rx::completion_channel>(ctx);
    auto shared_cq = std::make_unique<rx::completion_queue<rx::event_driven>>(ctx, 256, *shared_channel);
    auto shared_srq = std::make_unique<rx::shared_receive_queue>(*shared_pd, 32);
    auto user_pd = std::make_unique<rx::protection_domain>(ctx);
    auto user_cq = std::make_unique<rx::completion_queue<rx::busy_poll>>(ctx, 256);
    auto make_user_qp = [&] { return std::make_unique<user_qp>(*user_pd, *user_cq, *user_cq); };
    auto client_qp = make_user_qp(), server_qp = make_user_qp();
    auto spare_client_qp = make_user_qp(), spare_server_qp = make_user_qp();

    // One connection of each kind (client and server), and a live spare of each to assign into.
    auto own_pair = [&] {
        std::unique_ptr<own_connection> server;
        test::background srv([&] {
            server = std::make_unique<own_connection>(listener->get_request(20s).accept<rx::rc, rx::busy_poll>());
        });
        auto client = std::make_unique<own_connection>(cm::connect<rx::rc, rx::busy_poll>(test::device_address(port)));
        srv.join();
        return std::pair{std::move(client), std::move(server)};
    };
    auto shared_pair = [&] {
        std::unique_ptr<shared_connection> server;
        cm::resources<rx::event_driven> const r{.pd = *shared_pd,
                                                .send_cq = *shared_cq,
                                                .recv_cq = *shared_cq,
                                                .srq = shared_srq.get(),
                                                .channel = shared_channel.get()};
        test::background srv([&] {
            server =
                std::make_unique<shared_connection>(listener->get_request(20s).accept({}, cm::shared_qp<rx::rc>(r)));
        });
        auto client = std::make_unique<own_connection>(cm::connect<rx::rc, rx::busy_poll>(test::device_address(port)));
        srv.join();
        return std::pair{std::move(client), std::move(server)};
    };
    auto user_pair = [&](user_qp& c, user_qp& s) {
        std::unique_ptr<user_connection> server;
        test::background srv(
            [&] { server = std::make_unique<user_connection>(listener->get_request(20s).accept({}, cm::user_qp(s))); });
        auto client = std::make_unique<user_connection>(cm::connect(test::device_address(port), {}, cm::user_qp(c)));
        srv.join();
        return std::pair{std::move(client), std::move(server)};
    };
    // Named pairs, not structured bindings: clang 14 cannot capture those in a lambda.
    auto own = own_pair();
    auto shared = shared_pair();
    auto user = user_pair(*client_qp, *server_qp);
    auto& own_client = own.first;
    auto& own_server = own.second;
    auto& shared_client = shared.first;
    auto& shared_server = shared.second;
    auto& user_client = user.first;
    auto& user_server = user.second;

    // Multicast: a receiving and a sending member of one group.
    auto const group = cm::address::resolve("239.1.2.3", 0);
    auto const local = test::device_address();
    auto receiver = std::make_unique<cm::multicast_group<rx::busy_poll>>(local, group);
    auto sender = std::make_unique<cm::multicast_group<rx::busy_poll>>(local, group);

    // Memory, registered on each connection's PD (destroyed before the connections).
    std::vector<std::unique_ptr<test::buffer>> memory;
    auto mem = [&](rx::protection_domain& pd) -> rx::local_span<std::byte> {
        memory.push_back(std::make_unique<test::buffer>(pd, 4096));
        return memory.back()->span();
    };
    auto const own_out = mem(own_client->pd()), own_in = mem(own_server->pd());
    auto const shared_out = mem(shared_client->pd()), shared_in = mem(*shared_pd);
    auto const user_out = mem(*user_pd), user_in = mem(*user_pd);
    auto const mc_in = mem(receiver->pd()), mc_out = mem(sender->pd());

    auto use = [&](std::string const& when) {
        CAPTURE(when);
        CHECK(listener->port() == port);
        CHECK(&shared_server->pd() == shared_pd.get());
        CHECK(&shared_server->cq() == shared_cq.get());
        CHECK(shared_server->srq() == shared_srq.get());
        CHECK(shared_server->cq_channel() == shared_channel.get());
        CHECK(&user_client->qp() == client_qp.get());
        CHECK(&user_server->qp() == server_qp.get());
        CHECK(&user_client->pd() == user_pd.get());
        CHECK(&shared_pd->context() == &ctx);
        ping(own_client->qp(), own_client->cq(), own_server->qp(), own_server->cq(), own_out, own_in);
        ping(shared_client->qp(), shared_client->cq(), shared_server->qp(), shared_server->cq(), shared_out, shared_in,
             shared_server->srq());
        ping(user_client->qp(), *user_cq, user_server->qp(), *user_cq, user_out, user_in);
        CHECK(own_client->state() == cm::connection_state::established);
        CHECK(user_server->state() == cm::connection_state::established);
        // Multicast: the sender's datagram arrives at the receiver, within a bound.
        receiver->qp().post_recv(rx::recv{mc_in.first(rx::ud::grh_bytes + 64)}.id(1));
        test::fill_pattern(std::span{mc_out.data(), 64}, 6);
        sender->qp().post(rx::send{mc_out.first(64)}.to(sender->ah(), sender->qpn(), sender->qkey()).id(2));
        CHECK(wait_ok(sender->cq()).wr_id() == 2);
        CHECK(wait_ok(receiver->cq()).wr_id() == 1);
        CHECK(std::equal(mc_out.begin(), mc_out.begin() + 64, mc_in.begin() + rx::ud::grh_bytes));
    };
    use("as made");

    auto relocate_all = [&] {
        relocate(listener);
        relocate(shared_pd), relocate(shared_channel), relocate(shared_cq), relocate(shared_srq);
        relocate(user_pd), relocate(user_cq), relocate(client_qp), relocate(server_qp);
        relocate(own_client), relocate(own_server), relocate(shared_client), relocate(shared_server);
        relocate(user_client), relocate(user_server);
        relocate(receiver), relocate(sender);
    };
    relocate_all();
    use("after every object moved to a new address");

    // Live spares of every kind, then each object assigned into its spare.
    auto spare_own = own_pair();
    auto spare_shared = shared_pair();
    auto spare_user = user_pair(*spare_client_qp, *spare_server_qp);
    assign_into(listener, std::make_unique<cm::listener<rx::rc>>(test::device_address()));
    assign_into(own_client, std::move(spare_own.first));
    assign_into(own_server, std::move(spare_own.second));
    assign_into(shared_client, std::move(spare_shared.first));
    assign_into(shared_server, std::move(spare_shared.second));
    assign_into(user_client, std::move(spare_user.first));
    assign_into(user_server, std::move(spare_user.second));
    assign_into(shared_pd, std::make_unique<rx::protection_domain>(ctx));
    assign_into(shared_channel, std::make_unique<rx::completion_channel>(ctx));
    assign_into(shared_cq, std::make_unique<rx::completion_queue<rx::event_driven>>(ctx, 16, *shared_channel));
    assign_into(shared_srq, std::make_unique<rx::shared_receive_queue>(*shared_pd, 4));
    assign_into(user_pd, std::make_unique<rx::protection_domain>(ctx));
    assign_into(user_cq, std::make_unique<rx::completion_queue<rx::busy_poll>>(ctx, 16));
    assign_into(client_qp, std::make_unique<user_qp>(*user_pd, *user_cq, *user_cq));
    assign_into(server_qp, std::make_unique<user_qp>(*user_pd, *user_cq, *user_cq));
    assign_into(receiver,
                std::make_unique<cm::multicast_group<rx::busy_poll>>(local, cm::address::resolve("239.1.2.4", 0)));
    assign_into(sender,
                std::make_unique<cm::multicast_group<rx::busy_poll>>(local, cm::address::resolve("239.1.2.5", 0)));
    use("after every object was move-assigned into a live one");
    relocate_all();
    use("after every object moved again");
    memory.clear(); // before the connections whose PDs hold it
}
