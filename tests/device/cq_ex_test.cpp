// The extended CQ on a real device: completions read in place (ibv_start_poll, ibv_next_poll,
// ibv_end_poll, ibv_wc_read_*) under each completion strategy against what ibv_poll_cq(3) gives
// for the same traffic, on RC and UD; batches that stop at N and batches that find the CQ
// empty; a field the device lacks refused with a not_supported_error that names device and
// field; a failed completion reported with its status.
#include "rdmacxx/cq_ex.hpp"

#include "fixture.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

namespace rx = rdmacxx;
using namespace std::chrono_literals;

namespace {

using fields = rx::wc_fields<rx::wc_field::byte_len, rx::wc_field::imm, rx::wc_field::qp_num, rx::wc_field::src_qp>;

// What both ways of polling report for one completion. wr_id is relative to its round.
struct record {
    std::uint64_t wr_id;
    int status, opcode;
    std::uint32_t byte_len;
    bool has_imm;
    std::uint32_t imm, qp_num, src_qp;
    bool operator==(record const&) const = default;
    bool operator<(record const& o) const { return wr_id < o.wr_id; }
};

std::ostream& operator<<(std::ostream& os, record const& r) {
    os << r.wr_id << " status " << r.status << " opcode " << r.opcode << " byte_len " << r.byte_len;
    if (r.has_imm) os << " imm " << r.imm;
    return os << " qp " << r.qp_num << " src_qp " << r.src_qp;
}

record of(rx::work_completion const& wc, std::uint64_t round_base) {
    return {wc.wr_id() - round_base,           wc.status(), wc.opcode(), wc.byte_len(), wc.has_imm(),
            wc.has_imm() ? wc.imm_data() : 0U, wc.qp_num(), wc.src_qp()};
}
record of(rx::extended_completion<fields> const& wc, std::uint64_t round_base) {
    return {wc.wr_id() - round_base,           wc.status(), wc.opcode(), wc.byte_len(), wc.has_imm(),
            wc.has_imm() ? wc.imm_data() : 0U, wc.qp_num(), wc.src_qp()};
}

// `n` completions through ibv_poll_cq(3) (the CQ seen as the plain CQ it also is), each wait bounded by 10 s.
template <class C>
std::vector<record> by_poll_cq(rx::completion_queue<C>& cq, std::size_t n, std::uint64_t round_base) {
    std::vector<record> out;
    while (out.size() < n) {
        auto const wc = cq.wait_one(10s);
        REQUIRE_MESSAGE(wc.has_value(), "ibv_poll_cq: " << out.size() << " of " << n << " completions within 10 s");
        out.push_back(of(*wc, round_base));
    }
    std::sort(out.begin(), out.end());
    return out;
}

// `n` completions read in place through the extended CQ, up to 4 per batch, each wait bounded by 10 s.
template <class C>
std::vector<record> by_extended(rx::completion_queue_ex<C, fields>& cq, std::size_t n, std::uint64_t round_base) {
    std::vector<record> out;
    while (out.size() < n) {
        std::size_t const got = cq.template wait<4>([&](auto const& wc) { out.push_back(of(wc, round_base)); }, 10s);
        REQUIRE_MESSAGE(got != 0, "extended CQ: " << out.size() << " of " << n << " completions within 10 s");
    }
    std::sort(out.begin(), out.end());
    return out;
}

} // namespace

TEST_CASE_TEMPLATE("cq_ex: RC completions read in place match ibv_poll_cq's under every strategy", C, rx::busy_poll,
                   rx::event_driven, rx::adaptive) {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    int tag = 3;
    rx::completion_queue_ex<C, fields> cq(ctx, 64, {.comp_vector = 0, .user_context = &tag, .single_threaded = true});
    CHECK(cq.user_context() == &tag);
    CHECK(&cq.context() == &ctx);
    rx::queue_pair<rx::rc, C> a(pd, cq, cq), b(pd, cq, cq);
    a.connect(port, b.local_endpoint(port), {.remote_access = rx::all_remote});
    b.connect(port, a.local_endpoint(port), {.remote_access = rx::all_remote});
    test::buffer src(pd, 256), dst(pd, 1024);
    test::fill_pattern(src.bytes_, 9);

    // One round: three receives at b, then a send, a send with immediate, a write, a write with
    // immediate (it takes the third receive) and a read from a: 8 completions, the same in every
    // round but for wr_id.
    auto round = [&](std::uint64_t base) {
        b.post_recv(rx::recv{dst.span().subspan(0, 256)}.id(base + 1),
                    rx::recv{dst.span().subspan(256, 256)}.id(base + 2),
                    rx::recv{dst.span().subspan(768, 64)}.id(base + 8));
        a.post(rx::send{src.span().first(17)}.id(base + 3), rx::send_imm{src.span().first(33), 0xc0ffee}.id(base + 4),
               rx::write{src.span().first(64), dst.mr.remote().subspan(512, 64)}.id(base + 5),
               rx::write_imm{src.span().first(8), dst.mr.remote().subspan(576, 8), 77}.id(base + 6),
               rx::read{src.span().subspan(128, 40), dst.mr.remote().subspan(512, 40)}.id(base + 7));
    };
    round(100);
    std::vector<record> const want = by_poll_cq(static_cast<rx::completion_queue<C>&>(cq), 8, 100);
    round(200);
    std::vector<record> const got = by_extended(cq, 8, 200);

    REQUIRE(want.size() == 8);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
        CHECK(got[i] == want[i]);
    for (record const& r : want)
        CHECK(r.status == IBV_WC_SUCCESS);
    auto const find = [&](std::uint64_t id) {
        auto it = std::find_if(got.begin(), got.end(), [&](record const& r) { return r.wr_id == id; });
        REQUIRE(it != got.end());
        return *it;
    };
    CHECK(find(3).opcode == IBV_WC_SEND);
    CHECK(find(7).opcode == IBV_WC_RDMA_READ);
    CHECK(find(1).opcode == IBV_WC_RECV);
    CHECK(find(1).byte_len == 17);
    CHECK(find(2).byte_len == 33);
    CHECK(find(2).has_imm);
    CHECK(find(2).imm == 0xc0ffee);
    CHECK(find(8).opcode == IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK(find(8).imm == 77);
    CHECK(find(1).qp_num == b.qp_num());
    CHECK(find(3).qp_num == a.qp_num());
    CHECK(std::equal(src.bytes_.begin() + 128, src.bytes_.begin() + 168, dst.bytes_.begin() + 512));
    CHECK(cq.poll([](auto const&) { FAIL("a completion after the rounds"); }) == 0);
}

TEST_CASE("cq_ex: UD receives carry the sender's QP number, as ibv_poll_cq says") {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    rx::completion_queue_ex<rx::busy_poll, fields> cq(ctx, 64);
    rx::queue_pair<rx::ud, rx::busy_poll> a(pd, cq, cq), b(pd, cq, cq);
    a.activate(port);
    b.activate(port);
    rx::address_handle ah(pd, port, port.lid(), port.gid().gid);
    std::uint32_t const qkey = rx::default_qkey;
    test::buffer src(pd, 128), dst(pd, 2 * (rx::ud::grh_bytes + 128));
    auto round = [&](std::uint64_t base) {
        b.post_recv(rx::recv{dst.span().first(rx::ud::grh_bytes + 128)}.id(base + 1));
        b.post_recv(rx::recv{dst.span().subspan(rx::ud::grh_bytes + 128)}.id(base + 2));
        a.post(rx::send{src.span().first(100)}.id(base + 3).to(ah, b.qp_num(), qkey),
               rx::send_imm{src.span().first(50), 4242}.id(base + 4).to(ah, b.qp_num(), qkey));
    };
    round(10);
    std::vector<record> const want = by_poll_cq(static_cast<rx::completion_queue<rx::busy_poll>&>(cq), 4, 10);
    round(20);
    std::vector<record> const got = by_extended(cq, 4, 20);
    REQUIRE(want.size() == 4);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
        CHECK(got[i] == want[i]);
    CHECK(got[0].src_qp == a.qp_num());
    CHECK(got[0].byte_len == rx::ud::grh_bytes + 100);
    CHECK(got[1].src_qp == a.qp_num());
    CHECK(got[1].imm == 4242);
}

TEST_CASE("cq_ex: a batch stops at N, the next finds the rest, an empty CQ stays sound") {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    rx::completion_queue_ex<rx::busy_poll, fields> cq(ctx, 64);
    rx::completion_queue<rx::busy_poll> peer_cq(ctx, 16);
    rx::queue_pair<rx::rc, rx::busy_poll> a2(pd, cq, cq, {.max_send_wr = 32}), peer(pd, peer_cq, peer_cq);
    a2.connect(port, peer.local_endpoint(port), {.remote_access = rx::all_remote});
    peer.connect(port, a2.local_endpoint(port), {.remote_access = rx::all_remote});
    test::buffer src(pd, 64), dst(pd, 64);

    constexpr std::uint64_t n = 20;
    for (std::uint64_t i = 0; i < n; ++i)
        a2.post(rx::write{src.span().first(8), dst.mr.remote().first(8)}.id(i));
    // All 20 are queued once the last one is (RC completes in order); bounded by 10 s.
    std::vector<std::uint64_t> ids;
    auto const deadline = std::chrono::steady_clock::now() + 10s;
    while (ids.size() < n && std::chrono::steady_clock::now() < deadline) {
        std::size_t const got = cq.poll<16>([&](auto const& wc) {
            wc.throw_if_error();
            ids.push_back(wc.wr_id());
        });
        CHECK(got <= 16);
    }
    REQUIRE(ids.size() == n);
    for (std::uint64_t i = 0; i < n; ++i)
        CHECK(ids[i] == i);
    // Polling an empty CQ (a batch that found nothing, then more) leaves it sound: the next
    // completion is the next request's, and nothing follows it.
    for (int k = 0; k < 3; ++k)
        CHECK(cq.poll<16>([](auto const&) { FAIL("a completion on an empty CQ"); }) == 0);
    a2.post(rx::write{src.span().first(8), dst.mr.remote().first(8)}.id(99));
    std::uint64_t last = 0;
    REQUIRE(cq.wait<16>([&](auto const& wc) { last = wc.wr_id(); }, 10s) == 1);
    CHECK(last == 99);
    CHECK(cq.poll<16>([](auto const&) { FAIL("a completion after the last"); }) == 0);
}

TEST_CASE("cq_ex: a field the device lacks is refused with not_supported_error naming device and field") {
    rx::context ctx = test::open_test_device();
    if (ctx.limits().completion_timestamp_mask() != 0)
        FAIL("this device reports completion timestamps: the refusal is tested on rxe, which has none");
    using with_timestamp = rx::wc_fields<rx::wc_field::byte_len, rx::wc_field::completion_timestamp>;
    try {
        rx::completion_queue_ex<rx::busy_poll, with_timestamp> cq(ctx, 16);
        FAIL("an extended CQ with completion timestamps was created");
    } catch (rx::not_supported_error const& e) {
        std::string const what = e.what();
        INFO(what);
        CHECK(e.verb() == "ibv_create_cq_ex");
        CHECK(e.errno_value() == EOPNOTSUPP);
        CHECK(what == "ibv_create_cq_ex failed on " + std::string{ctx.name()} +
                          ": the device does not provide the completion timestamp (wc_field::completion_timestamp) "
                          "for an extended CQ (" +
                          std::system_category().message(EOPNOTSUPP) + ")");
        CHECK(what.find("byte length") == std::string::npos); // only what it refuses is named
        MESSAGE("refused: " << what);
    }
    // rxe provides the standard fields only: the wall-clock timestamp, VLAN and flow tag neither.
    using beyond =
        rx::wc_fields<rx::wc_field::completion_timestamp_wallclock, rx::wc_field::cvlan, rx::wc_field::flow_tag>;
    try {
        rx::completion_queue_ex<rx::busy_poll, beyond> cq(ctx, 16);
        FAIL("an extended CQ with the wall-clock timestamp, VLAN and flow tag was created");
    } catch (rx::not_supported_error const& e) {
        std::string const what = e.what();
        CHECK(what.find("the wall-clock completion timestamp (wc_field::completion_timestamp_wallclock), the customer "
                        "VLAN (wc_field::cvlan), the flow tag (wc_field::flow_tag)") != std::string::npos);
    }
    // What it has is created, and the CQ works with the single-threaded flag too.
    rx::completion_queue_ex<rx::event_driven, rx::standard_wc_fields> ok(ctx, 16, {.single_threaded = true});
    CHECK(ok.capacity() >= 16);
    CHECK_THROWS_AS(rx::completion_queue_ex<rx::busy_poll>(ctx, 0), rx::argument_error);
    CHECK_THROWS_AS(rx::completion_queue_ex<rx::busy_poll>(ctx, 16, {.comp_vector = ctx.num_comp_vectors()}),
                    rx::argument_error);
}

TEST_CASE_TEMPLATE("cq_ex: a failed completion is reported with its status", C, rx::busy_poll, rx::event_driven,
                   rx::adaptive) {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    rx::completion_queue_ex<C, fields> cq(ctx, 16);
    rx::completion_queue<C> peer_cq(ctx, 16);
    rx::queue_pair<rx::rc, C> a(pd, cq, cq), b(pd, peer_cq, peer_cq);
    a.connect(port, b.local_endpoint(port), {.remote_access = rx::all_remote});
    b.connect(port, a.local_endpoint(port), {.remote_access = rx::all_remote});
    test::buffer src(pd, 64), dst(pd, 64);
    // A wrong rkey: the responder refuses the write (remote access error), at once.
    auto const good = dst.mr.remote();
    rx::remote_span<std::byte> const bad{good.address(), 8, good.rkey() ^ 0x5500U};
    a.post(rx::write{src.span().first(8), bad}.id(41));
    ibv_wc_status status = IBV_WC_SUCCESS;
    std::uint64_t wr_id = 0;
    std::uint32_t qp = 0;
    REQUIRE(cq.wait(
                [&](auto const& wc) {
                    status = wc.status();
                    wr_id = wc.wr_id();
                    qp = wc.qp_num();
                    CHECK(!wc.ok());
                    CHECK(wc.error_code() == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
                },
                10s) == 1);
    CHECK(status == IBV_WC_REM_ACCESS_ERR);
    CHECK(wr_id == 41);
    CHECK(qp == a.qp_num());

    // The QP is in error now: the next request is flushed, and throw_if_error says so.
    a.post(rx::write{src.span().first(8), good.first(8)}.id(42));
    try {
        (void)cq.wait([](auto const& wc) { wc.throw_if_error(); }, 10s);
        FAIL("a flushed request completed without error");
    } catch (rx::wc_error const& e) {
        CHECK(e.code() == rx::make_wc_error_code(IBV_WC_WR_FLUSH_ERR));
        CHECK(e.wr_id() == 42);
    }
    CHECK(cq.poll([](auto const&) { FAIL("a completion after the flushed one"); }) == 0);
}
