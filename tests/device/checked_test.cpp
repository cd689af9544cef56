// Opt-in in-flight tracking on a real device: `checked` queue pairs count their requests per QP
// and per memory region until the completions are polled, refuse to let a region with work in
// flight go, and drain a destroyed QP's work before the QP is gone.
#include "fixture.hpp"
#include "rdmacxx/checked.hpp" // opt-in: not part of the umbrella header

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;

namespace {

using test::wait_ok;

// Records what destructors report instead of terminating, for the duration of a test.
struct recorded_errors {
    recorded_errors() : previous(rx::set_in_flight_handler(&record)) { messages().clear(); }
    ~recorded_errors() { (void)rx::set_in_flight_handler(previous); }
    recorded_errors(recorded_errors const&) = delete;
    recorded_errors& operator=(recorded_errors const&) = delete;

    static std::vector<std::string>& messages() {
        static std::vector<std::string> m;
        return m;
    }
    static std::vector<std::uint64_t>& sends() {
        static std::vector<std::uint64_t> s;
        return s;
    }
    static void record(rx::in_flight_error const& e) noexcept {
        try {
            messages().emplace_back(e.what());
            sends().push_back(e.sends());
        } catch (...) {}
    }
    rx::in_flight_handler previous;
};

template <class Completion, class Post>
struct tracked {
    using completion = Completion;
    using post = Post;
};

} // namespace

TEST_CASE_TEMPLATE("checked: requests count per QP and per region until polled, and keep their wr_id", T,
                   tracked<rx::busy_poll, rx::legacy_post>, tracked<rx::event_driven, rx::legacy_post>,
                   tracked<rx::adaptive, rx::legacy_post>, tracked<rx::busy_poll, rx::extended_post>) {
    using C = rx::checked<typename T::completion>;
    rx::qp_capabilities caps;
    caps.max_inline_data = 64;
    test::loopback<rx::rc, C, typename T::post> lb{caps};
    test::buffer src(lb.pd, 256), dst(lb.pd, 512), peer(lb.pd, 256);
    test::fill_pattern(src.bytes_, 3);

    lb.b.post_recv(rx::recv{dst.span().first(256)}.id(11), rx::recv{dst.span().last(256)}.id(12));
    CHECK(lb.b.in_flight_recvs() == 2);
    CHECK(dst.mr.in_flight() == 2);

    lb.a.post(rx::send{src.span()}.id(21).unsignaled(), rx::send{src.span()}.id(22).unsignaled(),
              rx::write{src.span(), peer.mr.template remote<std::byte>()}.id(23));
    CHECK(lb.a.in_flight_sends() == 3);
    CHECK(src.mr.in_flight() == 3);
    CHECK(peer.mr.in_flight() == 0); // the target of a WRITE is the peer's: not this side's to count

    auto const done = wait_ok(lb.cq_a);
    CHECK(done.wr_id() == 23);          // the user's wr_id, not the ledger's tag
    CHECK(lb.a.in_flight_sends() == 0); // the two unsignaled sends completed before it
    CHECK(src.mr.in_flight() == 0);

    CHECK(wait_ok(lb.cq_b).wr_id() == 11);
    CHECK(lb.b.in_flight_recvs() == 1);
    CHECK(wait_ok(lb.cq_b).wr_id() == 12);
    CHECK(lb.b.in_flight_recvs() == 0);
    CHECK(dst.mr.in_flight() == 0);
    CHECK(std::equal(src.bytes_.begin(), src.bytes_.end(), dst.bytes_.begin()));
    CHECK(std::equal(src.bytes_.begin(), src.bytes_.end(), dst.bytes_.begin() + 256));
    CHECK(std::equal(src.bytes_.begin(), src.bytes_.end(), peer.bytes_.begin()));

    // Inline data is copied at posting: the send is in flight, its buffer's region is not.
    lb.b.post_recv(rx::recv{dst.span()}.id(13));
    lb.a.post(rx::send{src.span().first(32)}.inlined().id(24));
    CHECK(lb.a.in_flight_sends() == 1);
    CHECK(src.mr.in_flight() == 0);
    CHECK(wait_ok(lb.cq_a).wr_id() == 24);
    CHECK(wait_ok(lb.cq_b).wr_id() == 13);
    CHECK(lb.a.in_flight_sends() == 0);
}

TEST_CASE("checked: deregistering a region with work in flight throws and keeps it registered") {
    test::loopback<rx::rc, rx::checked<rx::busy_poll>> lb;
    test::buffer src(lb.pd, 128), dst(lb.pd, 128);
    test::fill_pattern(src.bytes_, 5);
    lb.b.post_recv(rx::recv{dst.span()}.id(1));
    std::uint32_t const lkey = dst.mr.lkey();
    try {
        dst.mr.deregister();
        FAIL("deregister() with a receive in flight did not throw");
    } catch (rx::in_flight_error const& e) {
        CHECK(e.sends() == 1);
        CHECK(std::string{e.what()}.find("cannot be deregistered while 1 work requests") != std::string::npos);
    }
    CHECK(dst.mr.lkey() == lkey); // still registered: the receive lands
    lb.a.post(rx::send{src.span()}.id(2));
    CHECK(wait_ok(lb.cq_a).wr_id() == 2);
    CHECK(wait_ok(lb.cq_b).wr_id() == 1);
    CHECK(std::equal(src.bytes_.begin(), src.bytes_.end(), dst.bytes_.begin()));
    dst.mr.deregister(); // nothing in flight now
    CHECK(dst.mr.native_handle() == nullptr);
}

TEST_CASE("checked: a run-time span of receives is tracked, and a refused one is not left on record") {
    test::loopback<rx::rc, rx::checked<rx::busy_poll>> lb({.max_send_wr = 64, .max_recv_wr = 15});
    std::size_t const cap = lb.b.capabilities().max_recv_wr;
    test::buffer src(lb.pd, 8), dst(lb.pd, 64 * 64);
    std::vector<rx::recv<>> recvs;
    for (std::size_t i = 0; i < 4; ++i)
        recvs.push_back(rx::recv{dst.span().subspan(i * 64, 64)}.id(500 + i));
    lb.b.post_recv(std::span{recvs});
    CHECK(lb.b.in_flight_recvs() == 4);
    CHECK(dst.mr.in_flight() == 4);
    for (std::size_t i = 0; i < 4; ++i)
        lb.a.post(rx::send{src.span()}.id(i));
    for (std::size_t i = 0; i < 4; ++i) {
        CHECK(wait_ok(lb.cq_a).wr_id() == i);
        CHECK(wait_ok(lb.cq_b).wr_id() == 500 + i); // the user's wr_id, not the ledger's tag
    }
    CHECK(lb.b.in_flight_recvs() == 0);

    // More than the queue holds, in one chain: the refused ones are taken off the ledger again.
    recvs.clear();
    for (std::size_t i = 0; i < cap + 5; ++i)
        recvs.push_back(rx::recv{dst.span().subspan(i * 64, 64)}.id(600 + i));
    try {
        lb.b.post_recv(std::span{recvs});
        FAIL("a chain longer than the receive queue was accepted whole");
    } catch (rx::wr_error const& e) {
        CHECK(e.bad_index() == cap);
        CHECK(e.wr_id() == 600 + cap);
    }
    CHECK(lb.b.in_flight_recvs() == cap);
    lb.b.reset(); // the posted receives go without completions
    CHECK(lb.b.in_flight_recvs() == 0);
}

TEST_CASE("checked: destroying a region with work in flight reports an in_flight_error") {
    recorded_errors const errors;
    test::loopback<rx::rc, rx::checked<rx::busy_poll>> lb;
    auto dst = std::make_unique<test::buffer>(lb.pd, 128);
    lb.b.post_recv(rx::recv{dst->span()}.id(1));
    dst.reset();
    REQUIRE(errors.messages().size() == 1);
    CHECK(errors.messages()[0].find("destroyed while 1 work requests that use it are in flight") != std::string::npos);
}

namespace {
using checked_rc = rx::queue_pair<rx::rc, rx::checked<rx::busy_poll>>;

// Two connected pairs, a–b and c–d, where a and c share one CQ. The sends of a to b stay in
// flight: b posts no receive and RNR retries go on forever.
struct two_pairs {
    two_pairs() {
        opt.rnr_retry_count = 7;
        opt.min_rnr_timer = std::chrono::microseconds{10};
        opt.remote_access = rx::all_remote;
        a->connect(port, b.local_endpoint(port), opt);
        b.connect(port, a->local_endpoint(port), opt);
        c->connect(port, d.local_endpoint(port), opt);
        d.connect(port, c->local_endpoint(port), opt);
    }
    rx::qp_settings opt;
    rx::context ctx = test::open_test_device();
    rx::end_port port{ctx};
    rx::protection_domain pd{ctx};
    rx::completion_queue<rx::checked<rx::busy_poll>> shared{ctx, 64}, other{ctx, 64};
    std::optional<checked_rc> a{std::in_place, pd, shared, shared};
    checked_rc b{pd, other, other};
    std::optional<checked_rc> c{std::in_place, pd, shared, shared};
    checked_rc d{pd, other, other};
    test::buffer src{pd, 64}, mine{pd, 64}, far{pd, 64};
};
} // namespace

TEST_CASE("checked: destroying a QP with sends in flight moves it to ERR, drains it, and reports") {
    recorded_errors const errors;
    two_pairs t;
    // c's completion waits in the shared CQ, unpolled, while a is destroyed.
    t.c->post(rx::write{t.src.span(), t.far.mr.remote<std::byte>()}.id(77));
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // it completes; nobody polls
    CHECK(t.c->in_flight_sends() == 1);                         // so it is still counted
    t.a->post_recv(rx::recv{t.mine.span()}.id(6));
    t.a->post(rx::send{t.src.span()}.id(5)); // b has no receive: RNR, retried forever
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(t.a->in_flight_sends() == 1);
    CHECK(t.src.mr.in_flight() == 2); // a's send and c's write
    CHECK(t.mine.mr.in_flight() == 1);

    t.a.reset();
    REQUIRE(errors.messages().size() == 1);
    std::string const& m = errors.messages()[0];
    CHECK(m.find("RC QP") != std::string::npos);
    CHECK(m.find("destroyed with 1 send and 1 receive requests in flight (oldest send wr_id 5)") != std::string::npos);
    CHECK(m.find("moved to ERR and drained their completions") != std::string::npos);
    CHECK(t.mine.mr.in_flight() == 0); // drained: no buffer of a's is written from now on
    CHECK(t.src.mr.in_flight() == 1);  // c's write is still to be polled

    auto const wc = t.shared.wait_one(); // the drain kept c's completion for the CQ's next poll
    CHECK(wc.ok());
    CHECK(wc.qp_num() == t.c->qp_num());
    CHECK(wc.wr_id() == 77);
    CHECK(t.src.mr.in_flight() == 0);
    CHECK(t.c->in_flight_sends() == 0);
    CHECK(t.shared.poll<4>().empty()); // a's flushed completions were taken by the drain
}

TEST_CASE("checked: a QP's drain takes its completions that another QP's drain kept") {
    recorded_errors const errors;
    two_pairs t;
    t.c->post(rx::write{t.src.span(), t.far.mr.remote<std::byte>()}.id(78));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    t.a->post(rx::send{t.src.span()}.id(5));
    t.a.reset(); // keeps c's completion
    t.c.reset(); // c's write is complete but unpolled: in flight as far as its owner knows
    REQUIRE(errors.messages().size() == 2);
    CHECK(errors.messages()[1].find("destroyed with 1 send and 0 receive requests in flight (oldest send wr_id 78)") !=
          std::string::npos);
    CHECK(errors.messages()[1].find("drained their completions") != std::string::npos); // found kept, not timed out
    CHECK(t.src.mr.in_flight() == 0);
    CHECK(t.shared.poll<4>().empty());
}

TEST_CASE("checked: a QP destroyed with only receives posted drains them quietly") {
    recorded_errors const errors;
    test::loopback<rx::rc, rx::checked<rx::event_driven>> lb;
    test::buffer dst(lb.pd, 64 * 8);
    for (std::uint64_t k = 0; k < 8; ++k)
        lb.b.post_recv(rx::recv{dst.span().subspan(k * 64, 64)}.id(k));
    CHECK(dst.mr.in_flight() == 8);
    lb.b = rx::queue_pair<rx::rc, rx::checked<rx::event_driven>>(lb.pd, lb.cq_b, lb.cq_b); // the old b goes
    CHECK(errors.messages().empty());
    CHECK(dst.mr.in_flight() == 0);
    CHECK(lb.cq_b.poll<8>().empty());
}

TEST_CASE("checked: a receive the device refuses is forgotten, the ones before it stay counted") {
    rx::qp_capabilities caps;
    caps.max_recv_wr = 4;
    test::loopback<rx::rc, rx::checked<rx::busy_poll>> lb{caps};
    test::buffer dst(lb.pd, 64);
    std::uint64_t posted = 0;
    rx::post_result r;
    while ((r = lb.b.try_post_recv(rx::recv{dst.span()}.id(posted))))
        ++posted;
    CHECK(r.error == ENOMEM);
    CHECK(posted >= 4);
    CHECK(lb.b.in_flight_recvs() == posted);
    CHECK(dst.mr.in_flight() == posted);
    lb.b.reset(); // drains quietly, then RESET
    CHECK(lb.b.in_flight_recvs() == 0);
    CHECK(dst.mr.in_flight() == 0);
}

TEST_CASE("checked: unsignaled sends at the end are retired by the drain's marker, not by a timeout") {
    recorded_errors const errors;
    test::loopback<rx::rc, rx::checked<rx::busy_poll>> lb;
    test::buffer src(lb.pd, 64), peer(lb.pd, 64);
    auto const target = peer.mr.remote<std::byte>();
    lb.a.post(rx::write{src.span(), target}.unsignaled().id(1), rx::write{src.span(), target}.unsignaled().id(2),
              rx::write{src.span(), target}.unsignaled().id(3));
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // done, and no completion will say so
    CHECK(lb.a.in_flight_sends() == 3);
    lb.a = rx::queue_pair<rx::rc, rx::checked<rx::busy_poll>>(lb.pd, lb.cq_a, lb.cq_a); // the old a goes
    REQUIRE(errors.messages().size() == 1);
    CHECK(errors.messages()[0].find("destroyed with 3 send and 0 receive requests in flight (oldest send wr_id 1)") !=
          std::string::npos);
    CHECK(errors.messages()[0].find("drained their completions") != std::string::npos);
    CHECK(src.mr.in_flight() == 0);
    CHECK(lb.cq_a.poll<4>().empty()); // the marker's completion was the drain's
}

TEST_CASE("checked: receives from a shared receive queue pass through with the user's wr_id") {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    rx::completion_queue<rx::checked<rx::busy_poll>> cq_a(ctx, 64), cq_b(ctx, 64);
    rx::shared_receive_queue srq(pd, 16);
    rx::queue_pair<rx::rc, rx::checked<rx::busy_poll>> a(pd, cq_a, cq_a, srq), b(pd, cq_b, cq_b);
    a.connect(port, b.local_endpoint(port), {.remote_access = rx::all_remote});
    b.connect(port, a.local_endpoint(port), {.remote_access = rx::all_remote});
    test::buffer src(pd, 64), dst(pd, 64);
    test::fill_pattern(src.bytes_, 9);
    constexpr std::uint64_t looks_like_a_tag = (std::uint64_t{1} << 63) | 1;
    srq.post_recv(rx::recv{dst.span()}.id(looks_like_a_tag));
    a.post(rx::write{src.span(), dst.mr.remote<std::byte>()}.id(40).unsignaled()); // a send of a's in flight
    b.post(rx::send{src.span()}.id(41));
    CHECK(wait_ok(cq_b).wr_id() == 41);
    auto const wc = wait_ok(cq_a);
    CHECK(wc.is_recv());
    CHECK(wc.wr_id() == looks_like_a_tag);
    CHECK(a.in_flight_sends() == 1); // the receive retired none of a's sends
    CHECK(a.in_flight_recvs() == 0);
    CHECK(std::equal(src.bytes_.begin(), src.bytes_.end(), dst.bytes_.begin()));
    b.post_recv(rx::recv{src.span()}.id(43));
    a.post(rx::send{src.span().first(0)}.id(42)); // a signaled one retires the unsignaled write
    auto const last = cq_a.wait_one();
    CHECK(last.wr_id() == 42);
    CHECK(a.in_flight_sends() == 0);
    CHECK(wait_ok(cq_b).wr_id() == 43); // b's receive, polled: src may go before b
}
