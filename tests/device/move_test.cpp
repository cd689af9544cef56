// Movable parents on a real device: a CQ moved into a live CQ that has taken an event (its
// events are acknowledged, its CQ destroyed before its channel, no hang, no leak), and every
// parent — context, protection domain, CQ, SRQ, memory region — moved after its children exist
// (a growing std::vector), the children then used: QPs of every post policy, plain and checked,
// memory registered, sends and receives posted and polled, an end port printed.
#include "fixture.hpp"
#include "rdmacxx/checked.hpp" // opt-in: not part of the umbrella header

#include <fcntl.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;
using namespace std::chrono_literals;

namespace {

using test::wait_ok;

// Runs `f` on a thread and waits up to `bound` for it: false when it has not returned by then
// (the thread is left behind, blocked, and the caller fails the test).
bool finishes_within(std::chrono::milliseconds bound, std::function<void()> f) {
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    std::thread t{[done, g = std::move(f)] {
        g();
        done->set_value();
    }};
    if (finished.wait_for(bound) != std::future_status::ready) {
        t.detach();
        return false;
    }
    t.join();
    return true;
}

void fill_pattern_span(rx::local_span<std::byte> mem) { test::fill_pattern(std::span{mem.data(), mem.size()}, 3); }

// A SEND from `a` into a receive posted on `b` (or on `srq` when given), both completions polled.
template <class QpA, class QpB, class Completion>
void ping(QpA& a, QpB& b, rx::completion_queue<Completion>& cq, rx::local_span<std::byte> mem,
          rx::shared_receive_queue* srq = nullptr) {
    fill_pattern_span(mem);
    if (srq != nullptr)
        srq->post_recv(rx::recv{mem.subspan(512, 64)}.id(22));
    else
        b.post_recv(rx::recv{mem.subspan(512, 64)}.id(22));
    a.post(rx::send{mem.first(64)}.id(11));
    bool sent = false, received = false;
    for (int i = 0; i < 2; ++i) {
        auto const wc = wait_ok(cq);
        if (wc.is_recv()) {
            CHECK(wc.wr_id() == 22);
            CHECK(wc.byte_len() == 64);
            received = true;
        } else {
            CHECK(wc.wr_id() == 11);
            sent = true;
        }
    }
    CHECK(sent);
    CHECK(received);
}

bool fd_open(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

} // namespace

TEST_CASE_TEMPLATE("move: a CQ moved into a live CQ that took an event acknowledges it, destroys CQ then channel", C,
                   rx::event_driven, rx::adaptive, rx::checked<rx::event_driven>) {
    rx::context ctx = test::open_test_device();
    rx::end_port const port{ctx};
    rx::protection_domain pd{ctx};
    test::buffer buf(pd, 4096);
    rx::completion_queue<C> target{ctx, 16};
    rx::completion_queue<C> source{ctx, 16};
    int const old_channel_fd = target.native_handle()->channel->fd;
    {
        rx::queue_pair<rx::rc, C> a{pd, target, target}, b{pd, source, source};
        a.connect(port, b.local_endpoint(port));
        b.connect(port, a.local_endpoint(port));
        // The target takes an event through its channel, as wait() and an epoll loop do; it is
        // recorded (note_event) and stays unacknowledged: ibv_destroy_cq(3) waits for it.
        target.arm();
        b.post_recv(rx::recv{buf.span().subspan(1024, 64)}.id(2));
        a.post(rx::send{buf.span().first(64)}.id(1));
        ibv_cq* ev_cq = nullptr;
        void* ev_ctx = nullptr;
        REQUIRE(::ibv_get_cq_event(target.native_handle()->channel, &ev_cq, &ev_ctx) == 0);
        REQUIRE(ev_cq == target.native_handle());
        target.note_event();
        CHECK(wait_ok(target).wr_id() == 1);
        CHECK(wait_ok(source).wr_id() == 2);
    } // the QPs go: the target's CQ may now be destroyed

    ibv_cq* const moved_cq = source.native_handle();
    bool const done = finishes_within(10s, [&] { target = std::move(source); });
    REQUIRE_MESSAGE(done, "moving a CQ into one with an unacknowledged event did not return within 10 s");
    CHECK(target.native_handle() == moved_cq);
    CHECK(source.native_handle() == nullptr);
    // The old channel was destroyed (its fd closed), not refused with EBUSY and leaked.
    CHECK_FALSE(fd_open(old_channel_fd));

    // Self-move leaves it as it was.
    auto& alias = target;
    target = std::move(alias);
    CHECK(target.native_handle() == moved_cq);

    // The moved CQ works, through a wait that sleeps on its channel.
    rx::completion_queue<C> other{ctx, 16};
    rx::queue_pair<rx::rc, C> a{pd, other, other}, b{pd, target, target};
    a.connect(port, b.local_endpoint(port));
    b.connect(port, a.local_endpoint(port));
    b.post_recv(rx::recv{buf.span().subspan(1024, 64)}.id(4));
    a.post(rx::send{buf.span().first(64)}.id(3));
    CHECK(wait_ok(target).wr_id() == 4);
    CHECK(wait_ok(other).wr_id() == 3);

    // Destroying a CQ that took an event and has not acknowledged it returns too.
    auto doomed = std::make_unique<rx::completion_queue<C>>(ctx, 16);
    {
        rx::queue_pair<rx::rc, C> c{pd, *doomed, *doomed}, d{pd, other, other};
        c.connect(port, d.local_endpoint(port));
        d.connect(port, c.local_endpoint(port));
        doomed->arm();
        d.post_recv(rx::recv{buf.span().subspan(1024, 64)}.id(6));
        c.post(rx::send{buf.span().first(8)}.id(5));
        ibv_cq* ev_cq = nullptr;
        void* ev_ctx = nullptr;
        REQUIRE(::ibv_get_cq_event(doomed->native_handle()->channel, &ev_cq, &ev_ctx) == 0);
        doomed->note_event();
        CHECK(wait_ok(*doomed).wr_id() == 5);
        CHECK(wait_ok(other).wr_id() == 6);
    }
    REQUIRE_MESSAGE(finishes_within(10s, [&] { doomed.reset(); }),
                    "destroying a CQ with an unacknowledged event did not return within 10 s");
}

TEST_CASE("move: every parent moves after its children exist, and every child still works") {
    // The parents live in vectors that grow: each growth moves every element.
    std::vector<rx::context> contexts;
    std::vector<rx::protection_domain> pds;
    std::vector<rx::completion_queue<rx::busy_poll>> cqs;
    std::vector<rx::completion_queue<rx::checked<rx::busy_poll>>> checked_cqs;
    std::vector<rx::shared_receive_queue> srqs;
    std::vector<std::byte> bytes(1 << 16);
    std::vector<rx::memory_region> mrs;
    auto grow = [](auto& v) {
        auto const* const before = v.data();
        v.reserve(v.capacity() + 1);
        REQUIRE(v.data() != before); // really moved
    };

    contexts.push_back(test::open_test_device());
    rx::end_port const port{contexts[0]};
    pds.emplace_back(contexts[0]);
    cqs.emplace_back(contexts[0], 256);
    checked_cqs.emplace_back(contexts[0], 256);

    // The context moves: its domain, CQs and end port follow it.
    grow(contexts);
    rx::context& ctx = contexts[0];
    CHECK(&pds[0].context() == &ctx);
    CHECK(&cqs[0].context() == &ctx);
    CHECK(&checked_cqs[0].context() == &ctx);
    CHECK(&port.context() == &ctx);
    CHECK(port.to_string() == std::string{ctx.name()} + "/1");

    // The domain moves, then makes an SRQ and registers memory; those move too.
    grow(pds);
    CHECK(&pds[0].context() == &ctx);
    srqs.emplace_back(pds[0], 64);
    mrs.push_back(pds[0].register_memory(std::span{bytes}, rx::access::local_write | rx::access::remote_write));
    rx::local_span<std::byte> const mem = mrs[0].span();
    grow(srqs);
    grow(mrs);
    CHECK(mrs[0].span().lkey() == mem.lkey());
    grow(cqs);
    grow(checked_cqs);

    // QPs of every post policy, plain and checked, made on the moved parents.
    auto& cq = cqs[0];
    auto& ccq = checked_cqs[0];
    rx::queue_pair<rx::rc, rx::busy_poll> la{pds[0], cq, cq}, lb{pds[0], cq, cq};
    rx::queue_pair<rx::rc, rx::busy_poll, rx::extended_post> ea{pds[0], cq, cq}, eb{pds[0], cq, cq};
    rx::queue_pair<rx::rc, rx::checked<rx::busy_poll>> ca{pds[0], ccq, ccq}, cb{pds[0], ccq, ccq};
    rx::queue_pair<rx::rc, rx::checked<rx::busy_poll>, rx::extended_post> xa{pds[0], ccq, ccq}, xb{pds[0], ccq, ccq};
    rx::queue_pair<rx::rc, rx::busy_poll> sa{pds[0], cq, cq}, sb{pds[0], cq, cq, srqs[0]};
    rx::qp_settings const grant{.remote_access = rx::access::remote_write}; // the stream WRITEs
    auto connect = [&](auto& a, auto& b) {
        a.connect(port, b.local_endpoint(port), grant);
        b.connect(port, a.local_endpoint(port), grant);
    };
    connect(la, lb);
    connect(ea, eb);
    connect(ca, cb);
    connect(xa, xb);
    connect(sa, sb);
    rx::selective_signaling stream{la, cq, 4};

    auto use_all = [&](char const* when) {
        CAPTURE(when);
        auto const m = mrs[0].span();
        ping(la, lb, cqs[0], m.subspan(0, 4096));
        ping(ea, eb, cqs[0], m.subspan(4096, 4096));
        ping(ca, cb, checked_cqs[0], m.subspan(8192, 4096));
        ping(xa, xb, checked_cqs[0], m.subspan(12288, 4096));
        ping(sa, sb, cqs[0], m.subspan(16384, 4096), &srqs[0]);
        CHECK(ca.in_flight_sends() == 0);
        CHECK(xa.in_flight_recvs() == 0);
        for (int i = 0; i < 8; ++i)
            stream.post(rx::write{m.subspan(20480, 64), mrs[0].remote().subspan(24576, 64)}, i == 7);
        stream.finish();
        CHECK(&la.pd() == &pds[0]);
        CHECK(&xa.pd() == &pds[0]);
        CHECK(&pds[0].context() == &contexts[0]);
        CHECK(&cqs[0].context() == &contexts[0]);
        CHECK(port.to_string() == std::string{contexts[0].name()} + "/1");
        // A new region and new QPs on parents that moved under existing children.
        std::vector<std::byte> more(4096);
        auto extra = pds[0].register_memory(std::span{more}, rx::access::local_write);
        rx::queue_pair<rx::rc, rx::checked<rx::busy_poll>, rx::extended_post> ya{pds[0], checked_cqs[0],
                                                                                 checked_cqs[0]},
            yb{pds[0], checked_cqs[0], checked_cqs[0]};
        connect(ya, yb);
        ping(ya, yb, checked_cqs[0], extra.span());
    };
    use_all("after the parents moved before their QPs were made");

    // Every parent moves again, now under live QPs, a stream and spans.
    grow(contexts);
    grow(pds);
    grow(cqs);
    grow(checked_cqs);
    grow(srqs);
    grow(mrs);
    use_all("after the parents moved under live QPs");
}
