#include "fixture.hpp"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace rx = rdmacxx;

namespace {

using test::wait_ok;
constexpr std::size_t sizes[] = {1, 63, 4096, 65537, std::size_t{1} << 20};

} // namespace

TEST_CASE("RC send/recv moves the bytes, several sizes from 1 B to 1 MiB") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    test::buffer src(lb.pd, sizes[4]), dst(lb.pd, sizes[4]);
    unsigned seed = 1;
    for (std::size_t n : sizes) {
        CAPTURE(n);
        test::fill_pattern(src.bytes_, seed);
        std::fill(dst.bytes_.begin(), dst.bytes_.end(), std::byte{0});
        lb.b.post_recv(rx::recv{dst.span().first(n)}.id(100 + seed));
        lb.a.post(rx::send{src.span().first(n)}.id(seed));
        auto const sent = wait_ok(lb.cq_a);
        CHECK(sent.wr_id() == seed);
        CHECK(sent.opcode() == IBV_WC_SEND);
        auto const got = wait_ok(lb.cq_b);
        CHECK(got.wr_id() == 100 + seed);
        CHECK(got.is_recv());
        CHECK(got.byte_len() == n);
        CHECK(std::memcmp(src.bytes_.data(), dst.bytes_.data(), n) == 0);
        CHECK(dst.bytes_[n == sizes[4] ? n - 1 : n] == (n == sizes[4] ? src.bytes_[n - 1] : std::byte{0}));
        ++seed;
    }
}

TEST_CASE("RC RDMA WRITE and RDMA READ move the bytes, several sizes from 1 B to 1 MiB") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    test::buffer local(lb.pd, sizes[4]), remote(lb.pd, sizes[4]);
    unsigned seed = 10;
    for (std::size_t n : sizes) {
        CAPTURE(n);
        SUBCASE("write") {
            test::fill_pattern(local.bytes_, seed);
            std::fill(remote.bytes_.begin(), remote.bytes_.end(), std::byte{0});
            lb.a.post(rx::write{local.span().first(n), remote.mr.remote()}.id(n));
            CHECK(wait_ok(lb.cq_a).opcode() == IBV_WC_RDMA_WRITE);
            CHECK(std::memcmp(local.bytes_.data(), remote.bytes_.data(), n) == 0);
            if (n < sizes[4]) CHECK(remote.bytes_[n] == std::byte{0});
        }
        SUBCASE("read") {
            test::fill_pattern(remote.bytes_, seed);
            std::fill(local.bytes_.begin(), local.bytes_.end(), std::byte{0});
            lb.a.post(rx::read{local.span().first(n), remote.mr.remote()}.id(n));
            CHECK(wait_ok(lb.cq_a).opcode() == IBV_WC_RDMA_READ);
            CHECK(std::memcmp(local.bytes_.data(), remote.bytes_.data(), n) == 0);
            if (n < sizes[4]) CHECK(local.bytes_[n] == std::byte{0});
        }
        ++seed;
    }
}

TEST_CASE("several requests posted together go out as one chain and complete in order") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    test::buffer local(lb.pd, 4096), remote(lb.pd, 4096);
    test::fill_pattern(local.bytes_, 3);
    auto const l = local.span();
    auto const r = remote.mr.remote();
    lb.a.post(rx::write{l.subspan(0, 1024), r.subspan(0, 1024)}.id(1).unsignaled(),
              rx::write{l.subspan(1024, 1024), r.subspan(1024, 1024)}.id(2).unsignaled(),
              rx::write{l.subspan(2048, 2048), r.subspan(2048, 2048)}.id(3));
    auto const wc = wait_ok(lb.cq_a);
    CHECK(wc.wr_id() == 3); // the unsignaled ones complete silently
    CHECK(std::memcmp(local.bytes_.data(), remote.bytes_.data(), 4096) == 0);
    CHECK(lb.cq_a.poll<4>().empty());
}

TEST_CASE("a write to an rkey that does not exist completes with IBV_WC_REM_ACCESS_ERR") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    test::buffer local(lb.pd, 64), remote(lb.pd, 64);
    auto const good = remote.mr.remote();
    rx::remote_span<std::byte> const bogus{good.address(), good.size(), good.rkey() ^ 0x00ff0000U};
    lb.a.post(rx::write{local.span(), bogus}.id(77));
    auto const wc = lb.cq_a.wait_one();
    CHECK(wc.status() == IBV_WC_REM_ACCESS_ERR);
    CHECK(wc.wr_id() == 77);
    try {
        wc.throw_if_error();
        FAIL("no error thrown");
    } catch (rx::wc_error const& e) {
        CHECK(e.status() == IBV_WC_REM_ACCESS_ERR);
        CHECK(e.code() == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
        CHECK(e.qp_num() == lb.a.qp_num());
        CHECK(e.side() == rx::completion_side::unknown); // untracked: a failed completion does not say
    }
}

TEST_CASE("a span outside its region is refused before anything is posted") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    test::buffer reg(lb.pd, 4096);
    std::vector<std::byte> other(64);
    CHECK_THROWS_AS((void)reg.mr.span_of(std::span{other}), rx::argument_error);
    CHECK_THROWS_AS((void)reg.mr.span_of(std::span{reg.bytes_}.subspan(4000, 200)), rx::argument_error);
    CHECK_THROWS_AS((void)reg.mr.span(4000, 200), rx::argument_error);
    CHECK_THROWS_AS((void)reg.span().subspan(4090, 7), rx::argument_error);
    auto const inside = reg.mr.span_of(std::span{reg.bytes_}.subspan(100, 200));
    CHECK(inside.lkey() == reg.mr.lkey());
    CHECK(inside.size() == 200);
    CHECK(lb.cq_a.poll<4>().empty());
}

TEST_CASE("inline data over max_inline_data is refused before posting") {
    test::loopback<rx::rc, rx::busy_poll> lb{rx::qp_capabilities{.max_inline_data = 64}};
    test::buffer src(lb.pd, 4096), dst(lb.pd, 4096);
    auto const cap = lb.a.capabilities().max_inline_data;
    REQUIRE(cap >= 64);
    CHECK_THROWS_AS(lb.a.post(rx::write{src.span().first(cap + 1), dst.mr.remote()}.inlined()), rx::argument_error);
    auto const r = lb.a.try_post(rx::write{src.span().first(8), dst.mr.remote()}.id(1).unsignaled(),
                                 rx::write{src.span().first(cap + 1), dst.mr.remote()}.inlined());
    CHECK(r.error == EINVAL);
    CHECK(r.bad_index == 1);
    CHECK(lb.cq_a.poll<4>().empty());
    // Within the limit it goes out, and the buffer is free again at once.
    test::fill_pattern(src.bytes_, 9);
    lb.a.post(rx::write{src.span().first(cap), dst.mr.remote()}.inlined().id(5));
    std::fill(src.bytes_.begin(), src.bytes_.end(), std::byte{0});
    CHECK(wait_ok(lb.cq_a).wr_id() == 5);
    std::vector<std::byte> expect(cap);
    test::fill_pattern(expect, 9);
    CHECK(std::memcmp(expect.data(), dst.bytes_.data(), cap) == 0);
}

TEST_CASE("a wrong state transition names the transition and the attribute mask") {
    rx::context ctx = test::open_test_device();
    rx::end_port port(ctx);
    rx::protection_domain pd(ctx);
    rx::completion_queue<rx::busy_poll> cq(ctx, 16);
    rx::queue_pair<rx::rc, rx::busy_poll> qp(pd, cq, cq);
    CHECK(qp.state() == IBV_QPS_RESET);
    try {
        qp.to_rts(); // RESET -> RTS skips INIT and RTR
        FAIL("RESET -> RTS was accepted");
    } catch (rx::sys_error const& e) {
        std::string const what = e.what();
        CHECK(what.find("to RTS") != std::string::npos);
        CHECK(what.find("SQ_PSN") != std::string::npos);
        CHECK(e.verb() == "ibv_modify_qp");
    }
    qp.to_init(port);
    CHECK(qp.state() == IBV_QPS_INIT);
}

// A run of receives whose length is known only at run time, from a non-const span (a vector),
// goes to the device as one chain: ibv_post_recv(3) takes what fits the receive queue and names
// the first request it refused, which wr_error reports as bad_index; the receives before it were
// posted and complete in order, the rest were not.
TEST_CASE("a run-time span of receives is posted as one chain; a full receive queue names the first refused") {
    using qp_t = rx::queue_pair<rx::rc, rx::busy_poll>;
    test::loopback<rx::rc, rx::busy_poll> lb({.max_send_wr = 64, .max_recv_wr = 15});
    std::size_t const cap = lb.b.capabilities().max_recv_wr;
    REQUIRE(cap < qp_t::max_chain);
    std::size_t const count = qp_t::max_chain; // one chain, more than the queue holds
    test::buffer dst(lb.pd, count * 64), src(lb.pd, 64, std::byte{0x5a});
    std::vector<rx::recv<>> recvs; // not const: std::span{recvs} is a std::span<rx::recv<>>
    for (std::size_t i = 0; i < count; ++i)
        recvs.push_back(rx::recv{dst.span().subspan(i * 64, 64)}.id(1000 + i));

    std::size_t refused = count;
    try {
        lb.b.post_recv(std::span{recvs});
        FAIL("a chain longer than the receive queue was accepted whole");
    } catch (rx::wr_error const& e) {
        refused = e.bad_index();
        CHECK(e.wr_id() == 1000 + refused);
        CHECK(e.code() == std::errc::not_enough_memory);
    }
    CHECK(refused == cap); // the queue filled, then the provider stopped: one call, one bad_wr

    // Exactly the receives before the refused one were posted, in order.
    for (std::size_t i = 0; i < refused; ++i)
        lb.a.post(rx::send{src.span().first(8)}.id(i));
    for (std::size_t i = 0; i < refused; ++i) {
        CAPTURE(i);
        auto const sent = wait_ok(lb.cq_a);
        CHECK(sent.wr_id() == i);
        auto const got = wait_ok(lb.cq_b);
        CHECK(got.wr_id() == 1000 + i);
        CHECK(got.byte_len() == 8);
        CHECK(dst.bytes_[i * 64] == std::byte{0x5a});
    }
    CHECK(dst.bytes_[refused * 64] == std::byte{0}); // the refused receive's buffer was never written
    rx::work_completion none;
    CHECK(lb.cq_b.poll(std::span{&none, 1}) == 0);

    // The rest posts now that the queue is empty, again from the same span.
    lb.b.post_recv(std::span{recvs}.subspan(refused, cap));
    lb.a.post(rx::send{src.span().first(8)}.id(99));
    CHECK(wait_ok(lb.cq_b).wr_id() == 1000 + refused);
    CHECK(wait_ok(lb.cq_a).wr_id() == 99);
}

TEST_CASE("post takes a non-const span of send requests as it takes a span of const") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    test::buffer local(lb.pd, 4096, std::byte{0x33}), remote(lb.pd, 4096);
    std::vector<rx::write<>> writes;
    for (std::size_t i = 0; i < 8; ++i)
        writes.push_back(
            rx::write{local.span().subspan(i * 512, 512), remote.mr.remote().subspan(i * 512, 512)}.id(i).signaled(i ==
                                                                                                                   7));
    lb.a.post(std::span{writes}); // std::span<rx::write<>>
    CHECK(wait_ok(lb.cq_a).wr_id() == 7);
    CHECK(std::all_of(remote.bytes_.begin(), remote.bytes_.end(), [](std::byte b) { return b == std::byte{0x33}; }));
}
