// The policy matrix: every legal (transport, operation, completion strategy) combination moves
// data on a real device, and the receiver checks it byte for byte.
#include "fixture.hpp"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;

namespace {

using test::wait_ok;

template <class Transport, class Completion>
struct combo {
    using transport = Transport;
    using completion = Completion;
};

#define CONNECTED_COMBOS                                                                                               \
    combo<rx::rc, rx::busy_poll>, combo<rx::rc, rx::event_driven>, combo<rx::uc, rx::busy_poll>,                       \
        combo<rx::uc, rx::event_driven>, combo<rx::rc, rx::adaptive>, combo<rx::uc, rx::adaptive>
#define RC_COMBOS combo<rx::rc, rx::busy_poll>, combo<rx::rc, rx::event_driven>, combo<rx::rc, rx::adaptive>
#define ALL_COMPLETIONS rx::busy_poll, rx::event_driven, rx::adaptive

template <class Completion>
struct ud_pair {
    explicit ud_pair(rx::qp_capabilities caps = {})
        : ctx(test::open_test_device()), port(ctx), pd(ctx), cq_a(ctx, 256), cq_b(ctx, 256), a(pd, cq_a, cq_a, caps),
          b(pd, cq_b, cq_b, caps), ah(pd, port, port.lid(), port.gid().gid) {
        a.activate(port, opt);
        b.activate(port, opt);
    }
    rx::qp_settings opt{};
    rx::context ctx;
    rx::end_port port;
    rx::protection_domain pd;
    rx::completion_queue<Completion> cq_a, cq_b;
    rx::queue_pair<rx::ud, Completion> a, b;
    rx::address_handle ah;
};

} // namespace

TEST_CASE_TEMPLATE("policy: send and send_imm deliver bytes and immediate data", C, CONNECTED_COMBOS) {
    test::loopback<typename C::transport, typename C::completion> lb;
    test::buffer src(lb.pd, 8192), dst(lb.pd, 8192);
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{8192}}) {
        CAPTURE(n);
        test::fill_pattern(src.bytes_, static_cast<unsigned>(n));
        lb.b.post_recv(rx::recv{dst.span()}.id(1), rx::recv{dst.span()}.id(2));
        lb.a.post(rx::send{src.span().first(n)}.id(10));
        CHECK(wait_ok(lb.cq_a).wr_id() == 10);
        auto const got = wait_ok(lb.cq_b);
        CHECK(got.wr_id() == 1);
        CHECK(got.byte_len() == n);
        CHECK_FALSE(got.has_imm());
        CHECK(std::memcmp(src.bytes_.data(), dst.bytes_.data(), n) == 0);

        lb.a.post(rx::send_imm{src.span().first(n), 0xc0ffee00U + static_cast<std::uint32_t>(n)}.id(11));
        CHECK(wait_ok(lb.cq_a).wr_id() == 11);
        auto const imm = wait_ok(lb.cq_b);
        CHECK(imm.wr_id() == 2);
        REQUIRE(imm.has_imm());
        CHECK(imm.imm_data() == 0xc0ffee00U + n);
        CHECK(imm.opcode() == IBV_WC_RECV);
    }
}

TEST_CASE_TEMPLATE("policy: write and write_imm land in the peer's memory", C, CONNECTED_COMBOS) {
    test::loopback<typename C::transport, typename C::completion> lb;
    test::buffer src(lb.pd, 65536), dst(lb.pd, 65536), sink(lb.pd, 64);
    test::fill_pattern(src.bytes_, 5);
    lb.a.post(rx::write{src.span().first(30000), dst.mr.remote().subspan(100)}.id(1));
    CHECK(wait_ok(lb.cq_a).opcode() == IBV_WC_RDMA_WRITE);
    CHECK(std::memcmp(src.bytes_.data(), dst.bytes_.data() + 100, 30000) == 0);
    CHECK(dst.bytes_[99] == std::byte{0});

    test::fill_pattern(src.bytes_, 6);
    lb.b.post_recv(rx::recv{sink.span()}.id(7));
    lb.a.post(rx::write_imm{src.span(), dst.mr.remote(), 0x12345678}.id(2));
    CHECK(wait_ok(lb.cq_a).wr_id() == 2);
    auto const got = wait_ok(lb.cq_b);
    CHECK(got.wr_id() == 7);
    CHECK(got.opcode() == IBV_WC_RECV_RDMA_WITH_IMM);
    REQUIRE(got.has_imm());
    CHECK(got.imm_data() == 0x12345678U);
    CHECK(std::memcmp(src.bytes_.data(), dst.bytes_.data(), 65536) == 0);
}

TEST_CASE_TEMPLATE("policy: RDMA READ and gathered/scattered lists on RC", C, RC_COMBOS) {
    test::loopback<rx::rc, typename C::completion> lb{rx::qp_capabilities{.max_send_sge = 3, .max_recv_sge = 3}};
    test::buffer local(lb.pd, 4096), remote(lb.pd, 4096);
    test::fill_pattern(remote.bytes_, 8);
    auto const l = local.span();
    lb.a.post(
        rx::read{rx::gather(l.subspan(0, 100), l.subspan(1000, 200), l.subspan(3000, 50)), remote.mr.remote()}.id(3));
    CHECK(wait_ok(lb.cq_a).opcode() == IBV_WC_RDMA_READ);
    CHECK(std::memcmp(local.bytes_.data(), remote.bytes_.data(), 100) == 0);
    CHECK(std::memcmp(local.bytes_.data() + 1000, remote.bytes_.data() + 100, 200) == 0);
    CHECK(std::memcmp(local.bytes_.data() + 3000, remote.bytes_.data() + 300, 50) == 0);

    // A gathered send scattered into a three-part receive.
    test::buffer dst(lb.pd, 4096);
    test::fill_pattern(local.bytes_, 9);
    auto const d = dst.span();
    lb.b.post_recv(rx::recv{rx::gather(d.subspan(0, 10), d.subspan(100, 10), d.subspan(200, 1000))}.id(4));
    lb.a.post(rx::send{rx::gather(l.subspan(0, 5), l.subspan(50, 15))}.id(5));
    CHECK(wait_ok(lb.cq_a).wr_id() == 5);
    CHECK(wait_ok(lb.cq_b).byte_len() == 20);
    CHECK(std::memcmp(dst.bytes_.data(), local.bytes_.data(), 5) == 0);
    CHECK(std::memcmp(dst.bytes_.data() + 5, local.bytes_.data() + 50, 5) == 0);
    CHECK(std::memcmp(dst.bytes_.data() + 100, local.bytes_.data() + 55, 10) == 0);
}

TEST_CASE_TEMPLATE("policy: atomics compare-and-swap and fetch-and-add on RC", C, RC_COMBOS) {
    test::loopback<rx::rc, typename C::completion> lb;
    std::vector<std::uint64_t> target_mem(4, 0), result_mem(4, 0);
    auto target_mr = lb.pd.register_memory(std::span{target_mem}, rx::all_remote);
    auto result_mr = lb.pd.register_memory(std::span{result_mem}, rx::access::local_write);
    auto const target = target_mr.template remote<std::uint64_t>().subspan(1, 1);
    auto const result = result_mr.template span<std::uint64_t>();
    target_mem[1] = 100;

    lb.a.post(rx::compare_swap{result.subspan(0, 1), target, 100, 555}.id(1)); // succeeds
    CHECK(wait_ok(lb.cq_a).opcode() == IBV_WC_COMP_SWAP);
    CHECK(result_mem[0] == 100);
    CHECK(target_mem[1] == 555);

    lb.a.post(rx::compare_swap{result.subspan(1, 1), target, 100, 777}.id(2)); // fails: 555 != 100
    CHECK(wait_ok(lb.cq_a).wr_id() == 2);
    CHECK(result_mem[1] == 555);
    CHECK(target_mem[1] == 555);

    lb.a.post(rx::fetch_add{result.subspan(2, 1), target, 45}.id(3));
    CHECK(wait_ok(lb.cq_a).opcode() == IBV_WC_FETCH_ADD);
    CHECK(result_mem[2] == 555);
    CHECK(target_mem[1] == 600);
    CHECK(target_mem[0] == 0);
    CHECK(target_mem[2] == 0);

    CHECK_THROWS_AS(
        rx::fetch_add(result.subspan(3, 1), rx::remote_span<std::uint64_t>{target.address() + 4, 1, target.rkey()}, 1),
        rx::argument_error);
}

TEST_CASE_TEMPLATE("policy: UD send and send_imm through an address handle", Completion, ALL_COMPLETIONS) {
    ud_pair<Completion> ud;
    test::buffer src(ud.pd, 1024), dst(ud.pd, 40 + 1024);
    REQUIRE(ud.a.path_mtu_bytes() >= 256);
    std::size_t const n = std::min<std::size_t>(ud.a.path_mtu_bytes(), 1024);
    test::fill_pattern(src.bytes_, 12);
    ud.b.post_recv(rx::recv{dst.span()}.id(1), rx::recv{dst.span()}.id(2));
    ud.a.post(rx::send{src.span().first(n)}.id(5).to(ud.ah, ud.b.qp_num(), ud.opt.qkey));
    CHECK(wait_ok(ud.cq_a).wr_id() == 5);
    auto const got = wait_ok(ud.cq_b);
    CHECK(got.wr_id() == 1);
    CHECK(got.src_qp() == ud.a.qp_num());
    CHECK(got.has_grh());
    auto const payload = rx::ud_payload(std::span{dst.bytes_}, got);
    REQUIRE(payload.size() == n);
    CHECK(std::memcmp(payload.data(), src.bytes_.data(), n) == 0);

    ud.a.post(rx::send_imm{src.span().first(16), 99}.id(6).to(ud.ah, ud.b.qp_num(), ud.opt.qkey));
    CHECK(wait_ok(ud.cq_a).wr_id() == 6);
    auto const imm = wait_ok(ud.cq_b);
    CHECK(imm.imm_data() == 99);
    CHECK(rx::ud_payload(std::span{dst.bytes_}, imm).size() == 16);
}

TEST_CASE("policy: UD refuses a send over the path MTU and an unaddressed send before posting") {
    ud_pair<rx::busy_poll> ud;
    test::buffer src(ud.pd, 8192);
    auto const mtu = ud.a.path_mtu_bytes();
    REQUIRE(mtu > 0);
    try {
        ud.a.post(rx::send{src.span().first(mtu + 1)}.to(ud.ah, ud.b.qp_num(), ud.opt.qkey));
        FAIL("a UD send over the path MTU was posted");
    } catch (rx::argument_error const& e) {
        CHECK(std::string{e.what()}.find("path MTU") != std::string::npos);
    }
    CHECK_THROWS_AS(ud.a.post(rx::send{src.span().first(8)}), rx::argument_error);
    CHECK(ud.cq_a.poll<4>().empty());
}

TEST_CASE_TEMPLATE("policy: chains of 1, 4, 16 and 64 requests, one doorbell each", Completion, ALL_COMPLETIONS) {
    test::loopback<rx::rc, Completion> lb{rx::qp_capabilities{.max_send_wr = 128}};
    test::buffer src(lb.pd, 64 * 64), dst(lb.pd, 64 * 64);
    for (std::size_t len : {std::size_t{1}, std::size_t{4}, std::size_t{16}, std::size_t{64}}) {
        CAPTURE(len);
        test::fill_pattern(src.bytes_, static_cast<unsigned>(len));
        std::vector<rx::write<>> chain;
        for (std::size_t i = 0; i < len; ++i)
            chain.push_back(
                rx::write{src.span().subspan(i * 64, 64), dst.mr.remote().subspan(i * 64, 64)}.id(i).signaled(i + 1 ==
                                                                                                              len));
        lb.a.post(std::span<rx::write<> const>{chain});
        CHECK(wait_ok(lb.cq_a).wr_id() == len - 1);
        CHECK(std::memcmp(src.bytes_.data(), dst.bytes_.data(), len * 64) == 0);
    }
    // The variadic form chains mixed kinds.
    lb.b.post_recv(rx::recv{dst.span().first(64)}.id(9));
    lb.a.post(rx::write{src.span().first(8), dst.mr.remote().subspan(1000)}.unsignaled(),
              rx::read{src.span().subspan(100, 8), dst.mr.remote()}.unsignaled(),
              rx::send_imm{src.span().first(8), 3}.id(4));
    CHECK(wait_ok(lb.cq_a).wr_id() == 4);
    CHECK(wait_ok(lb.cq_b).imm_data() == 3);
}

TEST_CASE("policy: selective signaling streams 100,000 writes without overrunning the send queue or CQ") {
    test::loopback<rx::rc, rx::busy_poll> lb{rx::qp_capabilities{.max_send_wr = 128}};
    test::buffer src(lb.pd, 64), dst(lb.pd, 64);
    rx::selective_signaling stream(lb.a, lb.cq_a, 32);
    constexpr std::uint64_t total = 100000;
    for (std::uint64_t i = 0; i < total; ++i) {
        std::memcpy(src.bytes_.data(), &i, sizeof i); // inline: the buffer is free again on return
        stream.post(rx::write{src.span().first(8), dst.mr.remote()}.inlined().id(i));
    }
    stream.finish();
    CHECK(stream.posted() == total);
    CHECK(stream.outstanding() == 0);
    std::uint64_t last = 0;
    std::memcpy(&last, dst.bytes_.data(), sizeof last);
    CHECK(last == total - 1);
    CHECK(lb.cq_a.poll<4>().empty());
}

TEST_CASE_TEMPLATE("policy: a shared receive queue serves several QPs", Completion, ALL_COMPLETIONS) {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    rx::shared_receive_queue srq(pd, 64);
    rx::completion_queue<Completion> send_cq(ctx, 64), recv_cq(ctx, 64);
    std::vector<rx::queue_pair<rx::rc, Completion>> senders, receivers;
    for (int i = 0; i < 3; ++i) {
        senders.emplace_back(pd, send_cq, send_cq);
        receivers.emplace_back(pd, send_cq, recv_cq, srq);
    }
    for (std::size_t i = 0; i < 3; ++i) {
        senders[i].connect(port, receivers[i].local_endpoint(port));
        receivers[i].connect(port, senders[i].local_endpoint(port));
    }
    test::buffer src(pd, 64), dst(pd, 64 * 6);
    for (std::uint64_t k = 0; k < 6; ++k)
        srq.post_recv(rx::recv{dst.span().subspan(k * 64, 64)}.id(k));
    srq.arm_limit(2);
    CHECK(srq.limit() == 2);
    for (std::size_t i = 0; i < 3; ++i) {
        src.bytes_[0] = static_cast<std::byte>(0x40 + i);
        senders[i].post(rx::send{src.span().first(1)}.id(i));
        (void)wait_ok(send_cq);
    }
    std::vector<std::uint32_t> from;
    for (int k = 0; k < 3; ++k) {
        auto const wc = wait_ok(recv_cq);
        from.push_back(wc.qp_num());
        CHECK(dst.bytes_[wc.wr_id() * 64] == static_cast<std::byte>(0x40 + k)); // in order, one each
    }
    for (std::size_t i = 0; i < 3; ++i)
        CHECK(from[i] == receivers[i].qp_num());
}

TEST_CASE_TEMPLATE("policy: an event-driven or adaptive waiter sleeps until another thread posts", Completion,
                   rx::event_driven, rx::adaptive) {
    test::loopback<rx::rc, Completion> lb;
    test::buffer src(lb.pd, 64), dst(lb.pd, 64);
    lb.b.post_recv(rx::recv{dst.span()}.id(1));
    std::atomic<long> tid{0};
    std::atomic<bool> posted{false}, woke_after_post{false};
    std::thread waiter([&] {
        tid = static_cast<long>(::syscall(SYS_gettid));
        auto const wc = lb.cq_b.wait_one();
        woke_after_post = posted.load() && wc.ok();
    });
    // Wait until the waiter is asleep in the kernel (state S), not spinning (state R).
    char state = '?';
    for (int i = 0; i < 1000 && state != 'S'; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        if (tid == 0) continue;
        std::ifstream stat("/proc/self/task/" + std::to_string(tid.load()) + "/stat");
        std::string line;
        std::getline(stat, line);
        auto const close = line.rfind(')');
        if (close != std::string::npos && close + 2 < line.size()) state = line[close + 2];
    }
    CHECK(state == 'S');
    posted = true;
    lb.a.post(rx::send{src.span()}.id(2));
    waiter.join();
    CHECK(woke_after_post);
    CHECK(wait_ok(lb.cq_a).wr_id() == 2);
}

TEST_CASE("policy: no completion is lost across 100,000 event-driven wake-ups") {
    test::loopback<rx::rc, rx::event_driven> lb;
    test::buffer src(lb.pd, 8), dst(lb.pd, 8);
    constexpr std::uint64_t total = 100000;
    std::uint64_t received = 0, sent = 0;
    for (std::uint64_t i = 0; i < total; ++i) {
        lb.b.post_recv(rx::recv{dst.span()}.id(i));
        lb.a.post(rx::send{src.span()}.inlined(false).id(i));
        auto const r = lb.cq_b.wait_one();
        if (r.ok() && r.wr_id() == i) ++received;
        auto const s = lb.cq_a.wait_one();
        if (s.ok() && s.wr_id() == i) ++sent;
    }
    CHECK(received == total);
    CHECK(sent == total);
}

TEST_CASE("policy: RNR retry exhaustion surfaces as IBV_WC_RNR_RETRY_EXC_ERR") {
    rx::qp_settings opt;
    opt.rnr_retry_count = 0;
    opt.min_rnr_timer = std::chrono::microseconds{10};
    test::loopback<rx::rc, rx::busy_poll> lb{{}, opt};
    test::buffer src(lb.pd, 64);
    lb.a.post(rx::send{src.span()}.id(5)); // b has no receive posted
    auto const wc = lb.cq_a.wait_one();
    CHECK(wc.status() == IBV_WC_RNR_RETRY_EXC_ERR);
    CHECK(wc.wr_id() == 5);
    CHECK_THROWS_AS(wc.throw_if_error(), rx::wc_error);
}

TEST_CASE("policy: moving a QP to ERR flushes every outstanding request") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    test::buffer dst(lb.pd, 64 * 8);
    for (std::uint64_t k = 0; k < 8; ++k)
        lb.b.post_recv(rx::recv{dst.span().subspan(k * 64, 64)}.id(100 + k));
    lb.b.to_error();
    CHECK(lb.b.state() == IBV_QPS_ERR);
    std::vector<std::uint64_t> flushed;
    while (flushed.size() < 8) {
        auto const wc = lb.cq_b.wait_one();
        CHECK(wc.status() == IBV_WC_WR_FLUSH_ERR);
        flushed.push_back(wc.wr_id());
    }
    for (std::uint64_t k = 0; k < 8; ++k)
        CHECK(flushed[k] == 100 + k);
    CHECK(lb.cq_b.poll<4>().empty());
}

TEST_CASE_TEMPLATE("policy: the extended post API (ibv_wr_*) carries every operation of its transport", Completion,
                   rx::busy_poll, rx::event_driven) {
    test::loopback<rx::rc, Completion, rx::extended_post> lb{
        rx::qp_capabilities{.max_send_sge = 2, .max_inline_data = 64}};
    test::buffer src(lb.pd, 4096), dst(lb.pd, 4096), sink(lb.pd, 4096);
    test::fill_pattern(src.bytes_, 21);
    // send with immediate (one span: rdma-core 44's rxe miscounts multi-entry ibv_wr_set_sge_list)
    lb.b.post_recv(rx::recv{sink.span()}.id(1));
    lb.a.post(rx::send_imm{src.span().subspan(100, 30), 77}.id(2));
    CHECK(wait_ok(lb.cq_a).wr_id() == 2);
    auto const got = wait_ok(lb.cq_b);
    CHECK(got.imm_data() == 77);
    CHECK(got.byte_len() == 30);
    CHECK(std::memcmp(sink.bytes_.data(), src.bytes_.data() + 100, 30) == 0);
    // a chain of write, inline write and read, one ibv_wr_complete
    lb.a.post(rx::write{src.span().first(1000), dst.mr.remote()}.unsignaled(),
              rx::write{src.span().subspan(2000, 64), dst.mr.remote().subspan(2000)}.inlined().unsignaled(),
              rx::read{sink.span().subspan(3000, 1000), dst.mr.remote()}.id(3));
    CHECK(wait_ok(lb.cq_a).wr_id() == 3);
    CHECK(std::memcmp(dst.bytes_.data(), src.bytes_.data(), 1000) == 0);
    CHECK(std::memcmp(dst.bytes_.data() + 2000, src.bytes_.data() + 2000, 64) == 0);
    CHECK(std::memcmp(sink.bytes_.data() + 3000, src.bytes_.data(), 1000) == 0);
    // write with immediate and the atomics
    lb.b.post_recv(rx::recv{sink.span()}.id(4));
    lb.a.post(rx::write_imm{src.span().first(8), dst.mr.remote(), 5}.id(5));
    CHECK(wait_ok(lb.cq_a).wr_id() == 5);
    CHECK(wait_ok(lb.cq_b).imm_data() == 5);
    std::vector<std::uint64_t> target(1, 40), result(2, 0);
    auto tmr = lb.pd.register_memory(std::span{target}, rx::all_remote);
    auto rmr = lb.pd.register_memory(std::span{result}, rx::access::local_write);
    lb.a.post(
        rx::fetch_add{rmr.template span<std::uint64_t>().first(1), tmr.template remote<std::uint64_t>(), 2}.id(6),
        rx::compare_swap{rmr.template span<std::uint64_t>().last(1), tmr.template remote<std::uint64_t>(), 42, 9}.id(
            7));
    CHECK(wait_ok(lb.cq_a).wr_id() == 6);
    CHECK(wait_ok(lb.cq_a).wr_id() == 7);
    CHECK(result[0] == 40);
    CHECK(result[1] == 42);
    CHECK(target[0] == 9);
    // inline over the limit is still refused before anything is posted
    CHECK_THROWS_AS(
        lb.a.post(rx::write{src.span().first(lb.a.capabilities().max_inline_data + 1), dst.mr.remote()}.inlined()),
        rx::argument_error);
}

TEST_CASE("policy: the extended post API on UD and UC") {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    rx::completion_queue<rx::busy_poll> cq_a(ctx, 64), cq_b(ctx, 64);
    rx::queue_pair<rx::ud, rx::busy_poll, rx::extended_post> a(pd, cq_a, cq_a), b(pd, cq_b, cq_b);
    a.activate(port);
    b.activate(port);
    rx::address_handle ah(pd, port, port.lid(), port.gid().gid);
    test::buffer src(pd, 256), dst(pd, 40 + 256);
    test::fill_pattern(src.bytes_, 4);
    b.post_recv(rx::recv{dst.span()}.id(1));
    a.post(rx::send{src.span()}.id(2).to(ah, b.qp_num(), rx::default_qkey));
    CHECK(wait_ok(cq_a).wr_id() == 2);
    auto const wc = wait_ok(cq_b);
    auto const payload = rx::ud_payload(std::span{dst.bytes_}, wc);
    REQUIRE(payload.size() == 256);
    CHECK(std::memcmp(payload.data(), src.bytes_.data(), 256) == 0);

    test::loopback<rx::uc, rx::busy_poll, rx::extended_post> uc;
    test::buffer usrc(uc.pd, 512), udst(uc.pd, 512);
    test::fill_pattern(usrc.bytes_, 5);
    std::vector<rx::write<>> writes;
    for (std::size_t i = 0; i < 8; ++i)
        writes.push_back(
            rx::write{usrc.span().subspan(i * 64, 64), udst.mr.remote().subspan(i * 64, 64)}.id(i).signaled(i == 7));
    uc.a.post(std::span<rx::write<> const>{writes});
    CHECK(wait_ok(uc.cq_a).wr_id() == 7);
    CHECK(std::memcmp(usrc.bytes_.data(), udst.bytes_.data(), 512) == 0);
}
