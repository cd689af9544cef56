// Const-correct spans and faithful completion errors on a real device: memory registered
// without local write hands out only spans of const, which still send; a failed completion of a
// checked QP names the request that was posted, an untracked one claims nothing it cannot know.
#include "fixture.hpp"
#include "rdmacxx/checked.hpp" // opt-in: not part of the umbrella header

#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace rx = rdmacxx;

TEST_CASE("types: memory registered without local_write gives no writable span, and its spans of const still send") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    std::vector<std::byte> source(256);
    test::fill_pattern(source, 3);
    auto const ro = lb.pd.register_memory(std::span{source}, rx::access::remote_read);
    CHECK(ro.rights() == rx::access::remote_read);

    // Whatever a READ, a receive or an atomic result would need is refused where the span is made.
    CHECK_THROWS_WITH_AS((void)ro.span(), doctest::Contains("registered without access::local_write"),
                         rx::argument_error);
    CHECK_THROWS_AS((void)ro.span<std::uint64_t>(0, 4), rx::argument_error);
    CHECK_THROWS_AS((void)ro.span_of(std::span{source}.first(8)), rx::argument_error);

    // Spans of const are what it gives; they send and RDMA WRITE as any other.
    rx::local_span<std::byte const> const payload = ro.span<std::byte const>();
    rx::local_span<std::byte const> const part = ro.span_of(std::span<std::byte const>{source}.subspan(16, 32));
    CHECK(part.size() == 32);
    test::buffer landing(lb.pd, 256), target(lb.pd, 256);
    lb.b.post_recv(rx::recv{landing.span()}.id(1));
    lb.a.post(rx::send{payload}.id(2), rx::write{part, target.mr.remote()}.id(3));
    std::array<rx::work_completion, 3> got{};
    std::size_t n = 0;
    for (int spins = 0; n < 2 && spins < 1'000'000; ++spins)
        n += lb.cq_a.poll(std::span{got}.subspan(n, 2 - n));
    REQUIRE(n == 2);
    CHECK(got[0].ok());
    CHECK(got[1].ok());
    auto const rwc = lb.cq_b.wait_one();
    REQUIRE(rwc.ok());
    CHECK(rwc.byte_len() == 256);
    CHECK(std::equal(source.begin(), source.end(), landing.bytes_.begin()));
    CHECK(std::equal(source.begin() + 16, source.begin() + 48, target.bytes_.begin()));
}

TEST_CASE("types: a failed completion of a checked QP names its queue, operation, remote address and rkey") {
    test::loopback<rx::rc, rx::checked<rx::busy_poll>> lb;
    test::buffer local(lb.pd, 4096), remote(lb.pd, 4096);
    auto const good = remote.mr.remote();
    rx::remote_span<std::byte> const bad{good.address() + 64, 64, good.rkey() ^ 0x00ff0000U};
    lb.a.post(rx::write{local.span().first(64), bad}.id(77));
    auto const wc = lb.cq_a.wait_one();
    REQUIRE_FALSE(wc.ok());
    CHECK(wc.wr_id() == 77); // the user's wr_id, not the ledger's tag
    try {
        wc.throw_if_error();
        FAIL("a failed completion did not throw");
    } catch (rx::wc_error const& e) {
        CHECK(e.status() == IBV_WC_REM_ACCESS_ERR);
        CHECK(e.wr_id() == 77);
        CHECK(e.side() == rx::completion_side::send);
        CHECK(e.request().opcode == IBV_WR_RDMA_WRITE);
        CHECK(e.request().remote_address == bad.address());
        CHECK(e.request().rkey == bad.rkey());
        std::ostringstream hex_address, hex_rkey;
        hex_address << std::hex << bad.address();
        hex_rkey << std::hex << bad.rkey();
        std::ostringstream dump;
        e.dump_detailed(dump, "E:", 2);
        CHECK(dump.str().find("E:   operation: RDMA WRITE\n") != std::string::npos);
        CHECK(dump.str().find("E:   remote_address: 0x" + hex_address.str() + "\n") != std::string::npos);
        CHECK(dump.str().find("E:   rkey: 0x" + hex_rkey.str() + "\n") != std::string::npos);
    }
}
