// CQ control and device limits on a real device: completion vectors and a user context at CQ
// creation for every completion strategy, ibv_resize_cq (up, with completions queued, and below
// them), the GID table in one call against the per-index queries, and the typed device limits
// against ibv_query_device_ex.
#include "fixture.hpp"
#include "rdmacxx/checked.hpp" // opt-in: not part of the umbrella header

#include <poll.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <span>
#include <string>

namespace rx = rdmacxx;
using namespace std::chrono_literals;

TEST_CASE_TEMPLATE("cq control: comp_vector and a user context at creation; an out-of-range vector is refused", C,
                   rx::busy_poll, rx::event_driven, rx::adaptive, rx::checked<rx::busy_poll>,
                   rx::checked<rx::event_driven>, rx::checked<rx::adaptive>) {
    rx::context ctx = test::open_test_device();
    int const vectors = ctx.num_comp_vectors();
    REQUIRE(vectors >= 1);
    CHECK(vectors == ctx.native_handle()->num_comp_vectors);

    int tag = 7;
    rx::completion_queue<C> cq(ctx, 16, rx::cq_options{.comp_vector = vectors - 1, .user_context = &tag});
    CHECK(cq.user_context() == &tag);
    CHECK(cq.native_handle()->cq_context == &tag);
    rx::completion_queue<C> plain(ctx, 16);
    CHECK(plain.user_context() == nullptr);

    std::string const count = std::to_string(vectors);
    for (int bad : {vectors, -1}) {
        CAPTURE(bad);
        try {
            rx::completion_queue<C> refused(ctx, 16, rx::cq_options{.comp_vector = bad});
            FAIL("a CQ on completion vector " << bad << " was created");
        } catch (rx::argument_error const& e) {
            std::string const what = e.what();
            CHECK(what.find("completion vector " + std::to_string(bad)) != std::string::npos);
            CHECK(what.find("has " + count + " completion vectors") != std::string::npos);
            CHECK(what.find(std::string{ctx.name()}) != std::string::npos);
        }
    }
    if constexpr (C::uses_channel) {
        rx::completion_channel channel(ctx);
        rx::completion_queue<C> shared(ctx, 16, channel, rx::cq_options{.comp_vector = 0, .user_context = &tag});
        CHECK(shared.user_context() == &tag);
        CHECK_THROWS_AS(rx::completion_queue<C>(ctx, 16, channel, rx::cq_options{.comp_vector = vectors}),
                        rx::argument_error);
    }
}

TEST_CASE("cq control: the user context comes back with the CQ's event") {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    int tag = 11;
    rx::completion_queue<rx::event_driven> cq(ctx, 16, rx::cq_options{.user_context = &tag});
    rx::completion_queue<rx::event_driven> peer_cq(ctx, 16);
    rx::queue_pair<rx::rc, rx::event_driven> a(pd, cq, cq), b(pd, peer_cq, peer_cq);
    a.connect(port, b.local_endpoint(port), {.remote_access = rx::all_remote});
    b.connect(port, a.local_endpoint(port), {.remote_access = rx::all_remote});
    test::buffer src(pd, 64, std::byte{1}), dst(pd, 64);
    b.post_recv(rx::recv{dst.span()}.id(1));
    cq.arm();
    a.post(rx::send{src.span()}.id(2));
    ibv_comp_channel* const ch = cq.native_handle()->channel;
    pollfd pfd{ch->fd, POLLIN, 0};
    REQUIRE(::poll(&pfd, 1, 10000) == 1); // bounded: 10 s
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    REQUIRE(::ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0);
    CHECK(ev_cq == cq.native_handle());
    CHECK(ev_ctx == &tag);
    cq.note_event();
    auto const wc = cq.wait_one(10s);
    REQUIRE(wc.has_value());
    CHECK(wc->ok());
    CHECK(wc->wr_id() == 2);
    REQUIRE(peer_cq.wait_one(10s).has_value());
}

TEST_CASE("cq control: resize up keeps the queued completions; below them the device refuses with EINVAL") {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    rx::completion_queue<rx::busy_poll> send_cq(ctx, 64), recv_cq(ctx, 8);
    int const before = recv_cq.capacity();
    REQUIRE(before >= 8);
    rx::queue_pair<rx::rc, rx::busy_poll> a(pd, send_cq, send_cq), b(pd, recv_cq, recv_cq);
    a.connect(port, b.local_endpoint(port), {.remote_access = rx::all_remote});
    b.connect(port, a.local_endpoint(port), {.remote_access = rx::all_remote});
    test::buffer src(pd, 8 * 64), dst(pd, 8 * 64);
    test::fill_pattern(src.bytes_, 3);
    constexpr unsigned n = 6;
    for (unsigned i = 0; i < n; ++i)
        b.post_recv(rx::recv{dst.span().subspan(i * 64, 64)}.id(100 + i));
    for (unsigned i = 0; i < n; ++i)
        a.post(rx::send{src.span().subspan(i * 64, 16 + i)}.id(i));
    // RC: the receiver queues its completion before it acknowledges, so once every send has
    // completed (each bounded by 10 s) the n receive completions sit in recv_cq, unpolled.
    for (unsigned i = 0; i < n; ++i) {
        auto const wc = send_cq.wait_one(10s);
        REQUIRE(wc.has_value());
        REQUIRE(wc->ok());
    }

    // Below the completions queued: the device's error, typed, and nothing lost.
    try {
        (void)recv_cq.resize(2);
        FAIL("resizing below " << n << " queued completions succeeded");
    } catch (rx::sys_error const& e) {
        CHECK(e.code() == std::errc::invalid_argument); // rxe: EINVAL
        CHECK(std::string{e.what()}.find("ibv_resize_cq") != std::string::npos);
    }
    CHECK_THROWS_AS((void)recv_cq.resize(0), rx::argument_error);

    int const after = recv_cq.resize(before * 8);
    CHECK(after >= before * 8);
    CHECK(recv_cq.capacity() == after);

    std::array<rx::work_completion, 16> out{};
    std::size_t got = 0;
    auto const deadline = std::chrono::steady_clock::now() + 10s;
    while (got < n && std::chrono::steady_clock::now() < deadline)
        got += recv_cq.poll(std::span{out}.subspan(got));
    REQUIRE(got == n);
    for (unsigned i = 0; i < n; ++i) {
        CHECK(out[i].ok());
        CHECK(out[i].wr_id() == 100 + i);
        CHECK(out[i].byte_len() == 16 + i);
    }
    CHECK(recv_cq.poll(std::span{out}) == 0);

    // The CQ goes on at its new size: a completion after the resize arrives.
    b.post_recv(rx::recv{dst.span().first(64)}.id(200));
    a.post(rx::send{src.span().first(8)}.id(50));
    auto const late = recv_cq.wait_one(10s);
    REQUIRE(late.has_value());
    CHECK(late->wr_id() == 200);
    REQUIRE(send_cq.wait_one(10s).has_value());
    CHECK(recv_cq.resize(4) >= 4); // nothing queued now: shrinking works
}

TEST_CASE("device limits: the GID table in one call matches the per-index queries") {
    rx::context ctx = test::open_test_device();
    auto const table = ctx.gid_table();
    REQUIRE_FALSE(table.empty());
    std::size_t per_port = 0;
    for (unsigned p = 1; p <= ctx.port_count(); ++p)
        per_port += ctx.gid_table(static_cast<std::uint8_t>(p)).size();
    CHECK(table.size() == per_port);
    for (auto const& e : table) {
        CAPTURE(e.to_string());
        REQUIRE(e.port >= 1);
        auto const port = static_cast<std::uint8_t>(e.port);
        CHECK(ctx.query_gid(port, static_cast<int>(e.index)) == e.gid);
        ibv_gid_entry raw{};
        REQUIRE(::ibv_query_gid_ex(ctx.native_handle(), e.port, e.index, &raw, 0) == 0);
        CHECK(rx::gid{raw.gid} == e.gid);
        CHECK(static_cast<rx::gid_type>(raw.gid_type) == e.type);
        CHECK(raw.ndev_ifindex == e.ndev_ifindex);
        CHECK(raw.port_num == e.port);
    }
    // The per-port reading now names the port as well.
    for (auto const& e : ctx.gid_table(1))
        CHECK(e.port == 1);
}

TEST_CASE("device limits: typed limits are ibv_query_device_ex's") {
    rx::context ctx = test::open_test_device();
    ibv_device_attr_ex raw{};
    REQUIRE(::ibv_query_device_ex(ctx.native_handle(), nullptr, &raw) == 0);
    auto const l = ctx.limits();
    CHECK(static_cast<int>(l.atomics()) == static_cast<int>(raw.orig_attr.atomic_cap));
    CHECK(l.max_responder_resources() == raw.orig_attr.max_qp_rd_atom);
    CHECK(l.max_initiator_depth() == raw.orig_attr.max_qp_init_rd_atom);
    CHECK(l.max_sge() == raw.orig_attr.max_sge);
    CHECK(l.max_sge_rd() == raw.orig_attr.max_sge_rd);
    CHECK(l.max_cqe() == raw.orig_attr.max_cqe);
    CHECK(l.max_qp_wr() == raw.orig_attr.max_qp_wr);
    CHECK(l.odp_general_caps() == raw.odp_caps.general_caps);
    CHECK(l.completion_timestamp_mask() == raw.completion_timestamp_mask);
    CHECK(l.cap_flags() == raw.device_cap_flags_ex);
    CHECK(l.memory_windows() == ((raw.device_cap_flags_ex & IBV_DEVICE_MEM_WINDOW) != 0));
    CHECK(l.memory_management_extensions() == ((raw.device_cap_flags_ex & IBV_DEVICE_MEM_MGT_EXTENSIONS) != 0));
    // What rxe (kernel 6.1) reports, so the docs' table stays true.
    if (ctx.name().starts_with("rxe")) {
        CHECK(l.atomics() == rx::atomic_capability::hca);
        CHECK(l.max_responder_resources() >= 1);
        CHECK(l.max_sge() >= 1);
        CHECK(l.memory_windows());
        CHECK_FALSE(l.on_demand_paging());
        CHECK(l.completion_timestamp_mask() == 0);
        // The largest inline payload is not in the query: a QP asks for it. rxe grants 512 bytes
        // and refuses 513 with EINVAL (docs/devices.md, devinfo -v's probe).
        rx::protection_domain pd(ctx);
        rx::completion_queue<rx::busy_poll> cq(ctx, 4);
        rx::queue_pair<rx::rc, rx::busy_poll> fits(pd, cq, cq, rx::qp_capabilities{.max_inline_data = 512});
        CHECK(fits.capabilities().max_inline_data >= 512);
        try {
            rx::queue_pair<rx::rc, rx::busy_poll> over(pd, cq, cq, rx::qp_capabilities{.max_inline_data = 513});
            FAIL("an rxe QP with 513 bytes of inline data was created");
        } catch (rx::sys_error const& e) {
            CHECK(e.code() == std::errc::invalid_argument);
        }
    }
    // A CQ at the device's max_cqe is allowed; one past it is the device's EINVAL.
    try {
        rx::completion_queue<rx::busy_poll> too_big(ctx, l.max_cqe() + 1);
        FAIL("a CQ of max_cqe + 1 = " << l.max_cqe() + 1 << " entries was created");
    } catch (rx::sys_error const& e) {
        CHECK(e.code() == std::errc::invalid_argument);
    }
}
