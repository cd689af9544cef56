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

namespace {

// What the io::loan tests share: a's QP lends `region` to b's through a type 2 window and waits
// for b's notice on a receive pool of a.
struct loan_fixture {
    static constexpr std::size_t slice = 256;
    static constexpr rx::access lent_rights = rx::access::remote_read | rx::access::remote_write;
    test::asio_pair<> p{128};
    test::buffer region{p.pd, 8 * slice, std::byte{0}, rx::access::local_write | rx::access::mw_bind};
    test::buffer late{p.pd, slice, std::byte{0xff}};
    test::buffer notes{p.pd, 8 * 64};
    test::buffer note{p.pd, 64};

    // b's WRITE through `span`, awaited; its outcome.
    std::error_code write_from_b(rx::remote_span<std::byte> span) {
        std::optional<std::error_code> outcome;
        rxa::async_post(p.d, p.b, rx::write{late.span(), span},
                        [&](std::error_code ec, rx::work_completion) { outcome = ec; });
        test::run_bounded(p.io);
        REQUIRE(outcome.has_value());
        return *outcome;
    }
    // b's notice (a SEND, or a SEND with invalidate of `span`), awaited.
    template <class Wr>
    void notice_from_b(Wr const& wr) {
        std::optional<std::error_code> outcome;
        rxa::async_post(p.d, p.b, wr, [&](std::error_code ec, rx::work_completion) { outcome = ec; });
        test::run_bounded(p.io);
        REQUIRE(outcome.has_value());
        REQUIRE_FALSE(*outcome);
    }
    void reconnect() {
        p.a.reset();
        p.b.reset();
        p.a.connect(p.port, p.b.local_endpoint(p.port), {.remote_access = rx::all_remote});
        p.b.connect(p.port, p.a.local_endpoint(p.port), {.remote_access = rx::all_remote});
    }
    bool reads(std::size_t offset, std::byte value) const {
        for (std::size_t k = 0; k < slice; ++k)
            if (region.bytes_[offset + k] != value) return false;
        return true;
    }
};

} // namespace

TEST_CASE("asio: io::loan revokes the window by itself when co_await (wait_return || timer) times out: the "
          "handler runs after the invalidate, the peer's late WRITE fails, the reused memory is unchanged") {
    using namespace ::asio::experimental::awaitable_operators;
    loan_fixture f;
    constexpr std::size_t rounds = 40;
    rx::memory_window<2> window{f.p.pd};
    rxa::loan lent{f.p.d, f.p.a, window};
    CHECK_FALSE(lent.lent());
    std::set<std::uint32_t> rkeys;
    for (std::size_t i = 0; i < rounds; ++i) {
        INFO("round " << i);
        std::size_t const offset = (i % 8) * loan_fixture::slice;
        rxa::receive_pool pool{f.p.d, f.p.a, f.notes.span(), {.receives = 8, .message_bytes = 64}};
        std::exception_ptr failure;
        std::size_t index = 9;
        bool lent_after = true;
        std::uint64_t revoked_after = 0;
        ::asio::co_spawn(
            f.p.io,
            [&]() -> ::asio::awaitable<void> {
                (void)co_await lent.async_lend(f.region.mr, offset, loan_fixture::slice, loan_fixture::lent_rights,
                                               ::asio::use_awaitable);
                ::asio::steady_timer timer{f.p.io, std::chrono::milliseconds{1}};
                auto r = co_await (lent.async_wait_return(pool, ::asio::use_awaitable) ||
                                   timer.async_wait(::asio::use_awaitable));
                index = r.index();
                lent_after = lent.lent(); // the wait's handler has run: the window is revoked
                revoked_after = lent.revocations();
            },
            [&](std::exception_ptr e) { failure = e; });
        test::run_bounded(f.p.io);
        if (failure) std::rethrow_exception(failure);
        CHECK(index == 1); // the timer won: no notice was sent
        CHECK_FALSE(lent_after);
        CHECK(revoked_after == i + 1);
        CHECK(rkeys.insert(lent.remote().rkey()).second);
        CHECK(f.p.d.in_flight() == 0);

        auto const reused = static_cast<std::byte>(i % 255);
        std::memset(f.region.bytes_.data() + offset, static_cast<int>(reused), loan_fixture::slice);
        CHECK(f.write_from_b(lent.remote()) == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
        CHECK_MESSAGE(f.reads(offset, reused), "the late WRITE changed memory that was revoked and reused");
        f.reconnect(); // the remote access error ended both QPs
    }
    CHECK(rkeys.size() == rounds);
}

TEST_CASE("asio: io::loan — a notice in time: the lent memory holds the peer's WRITE; a plain notice leaves the "
          "window bound until async_revoke, a SEND with invalidate ends the loan by itself") {
    loan_fixture f;
    rx::memory_window<2> window{f.p.pd};
    rxa::loan lent{f.p.d, f.p.a, window};
    rxa::receive_pool pool{f.p.d, f.p.a, f.notes.span(), {.receives = 8, .message_bytes = 64}};
    auto lend = [&](std::size_t offset) {
        std::optional<std::error_code> outcome;
        lent.async_lend(f.region.mr, offset, loan_fixture::slice, loan_fixture::lent_rights,
                        [&](std::error_code ec, rx::work_completion) { outcome = ec; });
        CHECK(lent.lent()); // from the post on
        test::run_bounded(f.p.io);
        REQUIRE(outcome.has_value());
        REQUIRE_FALSE(*outcome);
    };
    auto wait = [&] {
        std::optional<std::error_code> outcome;
        std::size_t bytes = 0;
        lent.async_wait_return(pool, [&](std::error_code ec, rxa::received_message m) {
            outcome = ec;
            bytes = m.data().size();
        });
        test::run_bounded(f.p.io);
        REQUIRE(outcome.has_value());
        CHECK_FALSE(*outcome);
        CHECK(bytes == 16);
    };

    SUBCASE("a plain SEND, then async_revoke") {
        lend(0);
        CHECK_THROWS_AS(lent.async_lend(f.region.mr, 256, 256, loan_fixture::lent_rights, [](auto, auto) {}),
                        rx::argument_error); // lent already: nothing posted
        CHECK_FALSE(f.write_from_b(lent.remote()));
        f.notice_from_b(rx::send{f.note.span().first(16)});
        wait();
        CHECK(f.reads(0, std::byte{0xff})); // the peer's WRITE landed
        CHECK(lent.lent());                 // the device does not know the peer is done
        std::optional<std::error_code> revoked;
        lent.async_revoke([&](std::error_code ec, rx::work_completion wc) {
            revoked = ec;
            CHECK(wc.opcode() == IBV_WC_LOCAL_INV);
        });
        test::run_bounded(f.p.io);
        REQUIRE(revoked.has_value());
        CHECK_FALSE(*revoked);
        CHECK_FALSE(lent.lent());
        CHECK(lent.revocations() == 1);
        CHECK(f.write_from_b(lent.remote()) == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
    }
    SUBCASE("a SEND with invalidate") {
        lend(0);
        rx::remote_span<std::byte> const span = lent.remote();
        f.notice_from_b(rx::send_inv{f.note.span().first(16), span});
        wait();
        CHECK_FALSE(lent.lent()); // revoked at the peer: nothing posted here
        CHECK(lent.revocations() == 1);
        std::optional<std::error_code> revoked;
        lent.async_revoke([&](std::error_code ec, rx::work_completion) { revoked = ec; });
        test::run_bounded(f.p.io);
        REQUIRE(revoked.has_value());
        CHECK_FALSE(*revoked); // nothing lent: at once, without error
        CHECK(lent.revocations() == 1);
        CHECK(f.write_from_b(span) == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
    }
}

TEST_CASE("asio: io::loan — a wait cancelled through its slot completes only after the invalidate; a wait "
          "that fails with its QP in ERR cannot revoke and says so, the loan still lent") {
    loan_fixture f;
    rx::memory_window<2> window{f.p.pd};
    rxa::loan lent{f.p.d, f.p.a, window};
    rxa::receive_pool pool{f.p.d, f.p.a, f.notes.span(), {.receives = 8, .message_bytes = 64}};
    std::optional<std::error_code> bound;
    lent.async_lend(f.region.mr, 0, loan_fixture::slice, loan_fixture::lent_rights,
                    [&](std::error_code ec, rx::work_completion) { bound = ec; });
    test::run_bounded(f.p.io);
    REQUIRE(bound.has_value());
    REQUIRE_FALSE(*bound);

    SUBCASE("cancelled") {
        ::asio::cancellation_signal cancel;
        std::optional<std::error_code> outcome;
        bool lent_in_handler = true;
        lent.async_wait_return(
            pool, ::asio::bind_cancellation_slot(cancel.slot(), [&](std::error_code ec, rxa::received_message) {
                outcome = ec;
                lent_in_handler = lent.lent();
            }));
        cancel.emit(::asio::cancellation_type::terminal);
        CHECK_FALSE(outcome.has_value());
        test::run_bounded(f.p.io);
        REQUIRE(outcome.has_value());
        CHECK(test::aborted(*outcome));
        CHECK_FALSE(lent_in_handler); // revoked before the handler ran
        CHECK(f.write_from_b(lent.remote()) == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
    }
    SUBCASE("the QP in ERR") {
        f.p.a.to_error(); // the pool's receives flush: the wait fails, and so does the invalidate
        std::optional<std::error_code> outcome;
        lent.async_wait_return(pool, [&](std::error_code ec, rxa::received_message) { outcome = ec; });
        test::run_bounded(f.p.io);
        REQUIRE(outcome.has_value());
        CHECK(*outcome == rx::make_wc_error_code(IBV_WC_WR_FLUSH_ERR));
        CHECK(lent.lent()); // not revoked: destroy the QP before reusing the memory
        CHECK(lent.revocations() == 0);
    }
}
