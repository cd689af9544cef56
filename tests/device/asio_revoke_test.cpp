// Revocable remote access with the Asio adapter, on a real device: memory lent to a peer through
// a type 2 memory window is revoked (LOCAL INVALIDATE, awaited) when the wait for the peer's
// notice times out, before the memory is reused. The peer's late RDMA WRITE through the span it
// was given then completes with IBV_WC_REM_ACCESS_ERR and the reused memory is unchanged. 300
// rounds: past a window's 256 binds, when its rkey would repeat one it has had (a peer holding
// bind 44's span could write into bind 300's memory), the library refuses the bind and the
// test moves to a new window. Bounded: every step runs within run_bounded's 20 s.
#include "asio_fixture.hpp"
#include "asio_net.hpp"
#include "fixture.hpp"

#include "rdmacxx/memory_window.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <optional>
#include <set>
#include <system_error>

namespace rx = rdmacxx;
namespace rxa = rdmacxx::io;

TEST_CASE("asio: lent memory is revoked when the wait times out; the peer's late WRITE fails with a remote "
          "access error and the memory is unchanged, over 300 binds and two windows") {
    test::asio_pair<> p{128, rxa::cancel_mode::wait};
    constexpr std::size_t slice = 256;
    constexpr std::size_t rounds = 300;
    constexpr rx::access lent_rights = rx::access::remote_read | rx::access::remote_write;
    test::buffer region(p.pd, 8 * slice, std::byte{0}, rx::access::local_write | rx::access::mw_bind);
    test::buffer late(p.pd, slice, std::byte{0xff}); // never a reused byte (below)
    std::deque<rx::memory_window<2>> windows;
    windows.emplace_back(p.pd);
    std::set<std::uint32_t> rkeys;
    std::size_t refused = 0;

    auto reconnect = [&] {
        p.a.reset();
        p.b.reset();
        p.a.connect(p.port, p.b.local_endpoint(p.port), {.remote_access = rx::all_remote});
        p.b.connect(p.port, p.a.local_endpoint(p.port), {.remote_access = rx::all_remote});
    };
    auto await_post = [&](auto& qp, auto const& wr) {
        std::optional<std::error_code> outcome;
        rxa::async_post(p.d, qp, wr, [&](std::error_code ec, rx::work_completion) { outcome = ec; });
        test::run_bounded(p.io);
        REQUIRE(outcome.has_value());
        return *outcome;
    };

    for (std::size_t i = 0; i < rounds; ++i) {
        INFO("round " << i);
        std::size_t const offset = (i % 8) * slice;
        if (windows.back().binds_left() == 0) {
            // The library refuses the bind that would repeat an rkey: the test moves to a new window.
            CHECK_THROWS_AS(rx::bind_mw(windows.back(), region.mr, offset, slice, lent_rights), rx::argument_error);
            ++refused;
            windows.emplace_back(p.pd);
        }
        rx::memory_window<2>& window = windows.back();
        // Lend: bind the window over this round's slice and hand its span to the peer.
        REQUIRE_FALSE(await_post(p.a, rx::bind_mw{window, region.mr, offset, slice, lent_rights}));
        rx::remote_span<std::byte> const lent = window.remote();
        CHECK(rkeys.insert(lent.rkey()).second); // an rkey of its own

        // The wait for the peer's notice times out.
        ::asio::steady_timer timer{p.io, std::chrono::milliseconds{1}};
        timer.async_wait([](std::error_code) {});
        test::run_bounded(p.io);

        // Revoke before reusing: the handler of the invalidate runs once the device has done it.
        REQUIRE_FALSE(await_post(p.a, rx::local_invalidate{window}));
        auto const reused = static_cast<std::byte>(i % 255);
        std::memset(region.bytes_.data() + offset, static_cast<int>(reused), slice);

        // The peer's late WRITE through the span it was lent.
        std::error_code const ec = await_post(p.b, rx::write{late.span(), lent});
        CHECK(ec == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
        bool intact = true;
        for (std::size_t k = 0; k < slice; ++k)
            intact = intact && region.bytes_[offset + k] == reused;
        CHECK_MESSAGE(intact, "the late WRITE changed memory that was revoked and reused");
        reconnect(); // the remote access error ended both QPs
    }
    CHECK(windows.size() == 2);
    CHECK(refused == 1);
    CHECK(rkeys.size() == rounds);
    CHECK(p.d.in_flight() == 0);
}
