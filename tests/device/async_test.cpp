// Asynchronous events for real: the link of the device's network interface goes down and up,
// a remote access violation, a completion queue overflowed by a peer; and the real
// work-completion error of a bad rkey, dumped at level 2.
#include "fixture.hpp"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

namespace rx = rdmacxx;
using namespace std::chrono_literals;

namespace {

/// Sets or clears IFF_UP on a network interface (what `ip link set DEV up|down` does). The
/// device tests run as root in the Soft-RoCE VM.
void set_link(std::string const& ifname, bool up) {
    int const s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE_MESSAGE(s >= 0, "socket: " << std::strerror(errno));
    ifreq req{};
    std::strncpy(req.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    int rc = ::ioctl(s, SIOCGIFFLAGS, &req);
    if (rc == 0) {
        auto flags = static_cast<unsigned>(static_cast<unsigned short>(req.ifr_flags));
        flags = up ? (flags | IFF_UP) : (flags & ~static_cast<unsigned>(IFF_UP));
        req.ifr_flags = static_cast<short>(flags);
        rc = ::ioctl(s, SIOCSIFFLAGS, &req);
    }
    int const err = errno;
    ::close(s);
    REQUIRE_MESSAGE(rc == 0, "setting " << ifname << (up ? " up: " : " down: ") << std::strerror(err));
}

/// Brings the interface back up however the test ends, and waits for the port and its RoCE v2
/// GID to come back, so that the tests after this one find the device as they expect it.
struct link_restorer {
    rx::context& ctx;
    std::string ifname;
    ~link_restorer() {
        try {
            set_link(ifname, true);
        } catch (...) {}
        for (int i = 0; i < 100; ++i) {
            try {
                if (ctx.query_port(1).active() && ctx.select_gid(1).type == rx::gid_type::roce_v2 &&
                    !ctx.select_gid(1).gid.is_link_local())
                    return;
            } catch (...) {}
            std::this_thread::sleep_for(100ms);
        }
    }
};

/// Waits up to `timeout` for an event of `type`, collecting the others in `seen`.
std::optional<rx::async_event> wait_for(rx::async_event_queue& q, ibv_event_type type,
                                        std::chrono::milliseconds timeout, std::string& seen) {
    auto const deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        auto ev =
            q.wait(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
        if (!ev) break;
        if (ev->type() == type) return ev;
        seen += ev->to_string() + "; ";
    }
    return std::nullopt;
}

} // namespace

TEST_CASE("async: the event fd is the context's, made non-blocking by the queue, and reads nothing when idle") {
    rx::context ctx = test::open_test_device();
    rx::async_event_queue q{ctx};
    CHECK(q.fd() == ctx.async_fd());
    CHECK(q.fd() >= 0);
    CHECK(q.nonblocking());
    CHECK_FALSE(q.try_get().has_value());
    CHECK_FALSE(q.wait(50ms).has_value());
    // Non-blocking for real: the verb itself returns at once with EAGAIN.
    ibv_async_event raw{};
    errno = 0;
    CHECK(::ibv_get_async_event(ctx.native_handle(), &raw) == -1);
    CHECK(errno == EAGAIN);
    std::deque<rx::async_event> queue;
    CHECK(q.drain(queue) == 0);
    CHECK(queue.empty());
}

TEST_CASE("async: taking the network device down and up raises port error, then port active") {
    rx::context ctx = test::open_test_device();
    rx::end_port const port{ctx};
    std::string const ifname = port.gid().netdev_name();
    REQUIRE_FALSE(ifname.empty());
    rx::async_event_queue q{ctx};
    link_restorer restore{ctx, ifname};

    set_link(ifname, false);
    std::string seen;
    auto down = wait_for(q, IBV_EVENT_PORT_ERR, 10s, seen);
    CAPTURE(seen);
    REQUIRE_MESSAGE(down.has_value(), "no port error within 10 s of setting " << ifname << " down");
    CHECK(down->object() == rx::async_object::port);
    CHECK(down->port_num() == 1);
    CHECK(down->device_name() == ctx.name());
    CHECK_FALSE(down->is_error());
    CHECK(down->to_string() == "port error on " + std::string{ctx.name()} + " for port 1");
    down.reset(); // acknowledged
    CHECK(ctx.query_port(1).state() == IBV_PORT_DOWN);

    set_link(ifname, true);
    std::size_t handled = 0;
    bool active = false;
    auto const deadline = std::chrono::steady_clock::now() + 10s;
    while (!active && std::chrono::steady_clock::now() < deadline)
        handled += q.dispatch(
            [&](rx::async_event&& ev) {
                if (ev.type() == IBV_EVENT_PORT_ACTIVE && ev.port_num() == 1)
                    active = true;
                else
                    seen += ev.to_string() + "; ";
            },
            1s);
    CHECK(handled >= 1);
    REQUIRE_MESSAGE(active, "no port active within 10 s of setting " << ifname << " up");
    CHECK(ctx.query_port(1).active());
}

TEST_CASE("async: a remote access violation fails the requester's WR with a real wc_error, dumped at level 2") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    rx::async_event_queue q{lb.ctx};
    test::buffer local(lb.pd, 4096), remote(lb.pd, 4096);
    auto const good = remote.mr.remote();
    rx::remote_span<std::byte> const bad{good.address(), 64, good.rkey() ^ 0x5500U};
    lb.a.post(rx::write{local.span().first(64), bad}.id(7));
    auto const wc = lb.cq_a.wait_one();
    REQUIRE_FALSE(wc.ok());
    CHECK(wc.status() == IBV_WC_REM_ACCESS_ERR);
    try {
        wc.throw_if_error();
        FAIL("a failed completion did not throw");
    } catch (rx::wc_error& e) {
        e.push_context("Failed RDMA WRITE of 64 bytes to rkey 0x" +
                       [&] {
                           std::ostringstream os;
                           os << std::hex << bad.rkey();
                           return os.str();
                       }() +
                       " through " + lb.port.describe());
        std::ostringstream dump;
        e.dump_detailed(dump, "E:", 2);
        std::cout << "dump_detailed(level 2) of a real work-completion error:\n" << dump.str();
        CHECK(e.code() == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
        CHECK(e.qp_num() == lb.a.qp_num());
        CHECK(e.wr_id() == 7);
        CHECK(e.is_send());
        CHECK(dump.str().find("E: +work completion for wr_id 7 on QP " + std::to_string(lb.a.qp_num())) !=
              std::string::npos);
        CHECK(dump.str().find("E:   status: remote access error (10)") != std::string::npos);
        CHECK(dump.str().find("::ffff:") != std::string::npos); // the chosen GID is named
    }
    // Both QPs end in the error state.
    CHECK(lb.a.state() == IBV_QPS_ERR);
    CHECK(lb.b.state() == IBV_QPS_ERR);

    // The responder's async event. A hardware HCA raises IBV_EVENT_QP_ACCESS_ERR on the responder
    // QP. rxe (Linux 6.1, checked) raises no QP event at all: it reports the violation only in the
    // requester's completion (NAK, remote access error) and moves both QPs to ERR.
    std::deque<rx::async_event> events;
    (void)q.drain(events, 2s);
    while (q.drain(events, 200ms) != 0) {}
    std::string seen;
    int qp_events = 0;
    for (auto const& ev : events) {
        seen += ev.to_string() + "; ";
        if (ev.object() == rx::async_object::qp) ++qp_events;
    }
    CAPTURE(seen);
    bool const rxe = lb.ctx.name().substr(0, 3) == "rxe";
    if (rxe) {
        CHECK(qp_events == 0);
    } else {
        REQUIRE(qp_events >= 1);
        auto const& ev = events.front();
        CHECK(ev.type() == IBV_EVENT_QP_ACCESS_ERR);
        CHECK(ev.qp_num() == lb.b.qp_num());
        CHECK(ev.is_error());
    }
}

TEST_CASE("async: a peer overflowing a CQ raises CQ error on that CQ, as async_error when asked") {
    rx::context ctx = test::open_test_device();
    rx::end_port const port{ctx};
    rx::protection_domain pd{ctx};
    rx::completion_queue<rx::busy_poll> cq_a{ctx, 64}, cq_b{ctx, 1};
    rx::queue_pair<rx::rc, rx::busy_poll> a{pd, cq_a, cq_a, {}}, b{pd, cq_b, cq_b, {}};
    a.connect(port, b.local_endpoint(port));
    b.connect(port, a.local_endpoint(port));
    test::buffer buf(pd, 4096);
    for (int i = 0; i < 8; ++i)
        b.post_recv(rx::recv{buf.span().subspan(static_cast<std::size_t>(i) * 64, 64)});
    for (int i = 0; i < 8; ++i)
        a.post(rx::send{buf.span().subspan(2048, 16)}.unsignaled());

    {
        rx::async_event_queue raising{ctx, {.raise_errors = true}};
        try {
            auto const ev = raising.wait(10s);
            FAIL("no async_error; got " << (ev ? ev->to_string() : std::string{"nothing within 10 s"}));
        } catch (rx::async_error const& e) {
            CHECK(e.event_type() == IBV_EVENT_CQ_ERR);
            CHECK(e.code() == rx::make_async_error_code(IBV_EVENT_CQ_ERR));
            CHECK(e.device() == ctx.name());
            std::ostringstream cq_text;
            cq_text << "CQ " << static_cast<void const*>(cq_b.native_handle());
            CHECK(e.affected() == cq_text.str());
            std::ostringstream dump;
            e.dump_detailed(dump, "E:", 2);
            CHECK(dump.str().find("E:   event: CQ error (0)") != std::string::npos);
        }
    }
    // The same events, delivered as values: every one names the overflowed CQ. They are
    // acknowledged (the deque goes) before the CQ is destroyed.
    rx::async_event_queue q{ctx};
    std::deque<rx::async_event> events;
    (void)q.drain(events, 1s);
    for (auto const& ev : events) {
        CAPTURE(ev.to_string());
        CHECK(ev.type() == IBV_EVENT_CQ_ERR);
        CHECK(ev.cq() == cq_b.native_handle());
        CHECK(ev.qp() == nullptr);
        CHECK(ev.is_error());
    }
    events.clear();
    CHECK(b.state() == IBV_QPS_ERR);
}
