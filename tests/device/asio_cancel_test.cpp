// The Asio adapter's cancellation contract under load, on a real device: 10,000 cancellations
// racing the completions they cancel (receives, RDMA READs, SENDs), each emitted at one of four
// points of the operation's life. When a cancelled operation's handler runs, the request's memory
// is the caller's again: the handler overwrites its buffer with a canary (and, under ASan,
// poisons it), and every canary is checked once everything is done. A late write of the device
// (a message or READ response landing after the handler) would change the canary; a late read
// (a SEND gathering after the handler) would deliver canary bytes to the receiver. ASan sees the
// library's own accesses to a poisoned buffer; the device's writes come from the kernel, which
// ASan does not see, hence the canaries. Bounded: every step runs within run_bounded's 20 s.
#include "asio_fixture.hpp"
#include "asio_net.hpp"
#include "fixture.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <system_error>

#if defined(__SANITIZE_ADDRESS__)
#define RDMACXX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RDMACXX_TEST_ASAN 1
#endif
#endif
#if defined(RDMACXX_TEST_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace rx = rdmacxx;
namespace rxa = rdmacxx::io;

namespace {

constexpr std::size_t message_bytes = 256;
constexpr std::byte canary{0xA5};

// Overwrites `s` with the canary and, under ASan, poisons it: from now on nobody may touch it.
void retire(std::span<std::byte> s) {
    std::memset(s.data(), static_cast<int>(canary), s.size());
#if defined(RDMACXX_TEST_ASAN)
    ASAN_POISON_MEMORY_REGION(s.data(), s.size());
#endif
}

// Unpoisons `s` and says whether it still holds the canary.
bool canary_intact(std::span<std::byte> s) {
#if defined(RDMACXX_TEST_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(s.data(), s.size());
#endif
    for (std::byte b : s)
        if (b != canary) return false;
    return true;
}

enum class kind { recv, read, send };
// Where the cancellation is emitted: right after the operation starts; after the peer's side of
// it is posted; from a handler posted to the io_context; from inside the peer's completion handler.
enum class when { at_start, after_peer, posted, in_peer_handler };

struct tally {
    std::uint64_t completed = 0; // the cancellation came too late: the operation's own outcome
    std::uint64_t aborted = 0;
    std::uint64_t failed = 0; // a failed completion of its own (qp_to_error: its peer's QP may be in ERR already)
    std::uint64_t other = 0;
};

// Runs `rounds` cancellations in `mode`, kinds in turn and the moment of each cancellation drawn
// at random. Under qp_to_error a cancellation ends its QP: after each round both QPs go to ERR (what
// is still posted completes flushed) and are connected again, with a short ACK timeout and no
// retries so that a SEND to a QP already in ERR fails within tens of milliseconds.
void race(std::size_t rounds, rxa::cancel_mode mode) {
    test::asio_pair<> p{128, mode};
    rx::qp_settings const settings{.remote_access = rx::all_remote,
                                   .local_ack_timeout = rx::ack_timeout::from_code(12), // 16.8 ms
                                   .retry_count = 0};
    bool const ends_qp = mode == rxa::cancel_mode::qp_to_error;
    auto reconnect = [&] {
        p.a.reset();
        p.b.reset();
        p.a.connect(p.port, p.b.local_endpoint(p.port), settings);
        p.b.connect(p.port, p.a.local_endpoint(p.port), settings);
    };
    if (ends_qp) reconnect();
    // One buffer per round: a buffer, once its handler has run, is never used again.
    test::buffer mine(p.pd, rounds * message_bytes), theirs(p.pd, rounds * message_bytes), source(p.pd, message_bytes);
    test::fill_pattern(source.bytes_, 3);
    auto const remote_source = source.mr.remote();
    std::mt19937 rng{20261126};
    std::array<tally, 3> by_kind{};
    std::uint64_t mismatched = 0;

    for (std::size_t i = 0; i < rounds; ++i) {
        auto const k = static_cast<kind>(i % 3);
        auto const w = static_cast<when>(rng() % 4);
        auto const mine_i = mine.span().subspan(i * message_bytes, message_bytes);
        auto const theirs_i = theirs.span().subspan(i * message_bytes, message_bytes);
        std::span<std::byte> const mine_bytes{mine.bytes_.data() + i * message_bytes, message_bytes};
        std::span<std::byte> const theirs_bytes{theirs.bytes_.data() + i * message_bytes, message_bytes};
        ::asio::cancellation_signal signal;
        bool done = false;
        int peer_left = 0; // the peer's operations still to complete
        tally& t = by_kind[static_cast<std::size_t>(k)];
        std::array<std::byte, message_bytes> expected{};
        test::fill_pattern(expected, static_cast<unsigned>(i));

        auto on_done = [&](std::error_code ec, rx::work_completion) {
            done = true;
            if (!ec) {
                ++t.completed;
                // Completed: the bytes expected are in place before the handler runs.
                if (k == kind::recv && std::memcmp(mine_bytes.data(), expected.data(), message_bytes) != 0)
                    ++mismatched;
                if (k == kind::read && std::memcmp(mine_bytes.data(), source.bytes_.data(), message_bytes) != 0)
                    ++mismatched;
            } else if (test::aborted(ec)) {
                ++t.aborted;
            } else if (ends_qp && ec.category() == rx::wc_category()) {
                ++t.failed; // its own outcome on the device, e.g. an ACK the short timeout did not wait for
            } else {
                ++t.other;
                MESSAGE("round " << i << ": " << ec.message());
            }
            retire(mine_bytes); // the handler has run: the buffer is the caller's, and now garbage
        };
        // The peer's side: it succeeds unless a cancellation ended a QP. A receive of a SEND
        // checks that it got what the SEND gathered, never the canary written by the SEND's handler.
        auto on_peer = [&](std::error_code ec, rx::work_completion wc) {
            if (!ends_qp) CHECK_FALSE(ec);
            if (!ec && k == kind::send &&
                (wc.byte_len() != message_bytes ||
                 std::memcmp(theirs_bytes.data(), expected.data(), message_bytes) != 0))
                ++mismatched;
            if (--peer_left == 0 && w == when::in_peer_handler) signal.emit(::asio::cancellation_type::terminal);
        };
        auto cancellable = ::asio::bind_cancellation_slot(signal.slot(), on_done);
        auto emit_if = [&](when at) {
            if (w == at) signal.emit(::asio::cancellation_type::terminal);
        };

        switch (k) {
        case kind::recv: // b receives into mine_i, cancelled, while a sends the expected bytes
            std::memcpy(theirs_bytes.data(), expected.data(), message_bytes);
            rxa::async_recv(p.d, p.b, rx::recv{mine_i}, cancellable);
            emit_if(when::at_start);
            peer_left = 1;
            rxa::async_post(p.d, p.a, rx::send{theirs_i}, on_peer);
            break;
        case kind::read: // a READs the source into mine_i, cancelled; the peer's side: an 8-byte SEND
            rxa::async_post(p.d, p.a, rx::read{mine_i, remote_source}, cancellable);
            emit_if(when::at_start);
            peer_left = 2;
            rxa::async_recv(p.d, p.a, rx::recv{theirs_i}, on_peer);
            rxa::async_post(p.d, p.b, rx::send{source.span().first(8)}, on_peer);
            break;
        case kind::send: // a SENDs mine_i, cancelled; b receives it into theirs_i
            std::memcpy(mine_bytes.data(), expected.data(), message_bytes);
            peer_left = 1;
            rxa::async_recv(p.d, p.b, rx::recv{theirs_i}, on_peer);
            rxa::async_post(p.d, p.a, rx::send{mine_i}, cancellable);
            emit_if(when::at_start);
            break;
        }
        emit_if(when::after_peer);
        if (w == when::posted) ::asio::post(p.io, [&] { signal.emit(::asio::cancellation_type::terminal); });
        if (ends_qp) {
            // Whatever a cancellation did not end is ended once the cancelled handler has run.
            auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds{20};
            while (!done && std::chrono::steady_clock::now() < deadline)
                p.io.run_one_for(std::chrono::milliseconds{100});
            p.io.restart();
            REQUIRE_MESSAGE(done, "round " << i << ": the cancelled operation never completed");
            p.a.to_error();
            p.b.to_error();
        }
        test::run_bounded(p.io);
        REQUIRE_MESSAGE(done, "round " << i << ": the cancelled operation never completed");
        REQUIRE_MESSAGE(peer_left == 0, "round " << i << ": the peer's side never completed");
        REQUIRE(p.d.in_flight() == 0);
        REQUIRE(p.d.cancelled() == 0);
        if (ends_qp) reconnect();
    }

    std::size_t damaged = 0;
    for (std::size_t i = 0; i < rounds; ++i)
        if (!canary_intact(std::span{mine.bytes_}.subspan(i * message_bytes, message_bytes))) ++damaged;
    char const* names[] = {"receives", "READs", "SENDs"};
    for (std::size_t k = 0; k < 3; ++k)
        MESSAGE(std::string{names[k]} << ": " << by_kind[k].completed << " completed before the cancellation took, "
                                      << by_kind[k].aborted << " aborted, " << by_kind[k].failed
                                      << " failed on the device, " << by_kind[k].other << " other");
    CHECK(damaged == 0);
    CHECK(mismatched == 0);
    for (tally const& t : by_kind)
        CHECK(t.other == 0);
    CHECK(p.d.stray() == 0);
}

} // namespace

TEST_CASE("asio: 10,000 cancellations racing receives, READs and SENDs: no write or read lands after its handler") {
    SUBCASE("cancel_mode::wait, 9,000 cancellations") { race(9'000, rxa::cancel_mode::wait); }
    SUBCASE("cancel_mode::qp_to_error, 1,000 cancellations, the QPs connected again after each") {
        race(1'000, rxa::cancel_mode::qp_to_error);
    }
}

TEST_CASE("asio: a receive_pool's cancelled async_receive takes no message; the next one gets it") {
    test::asio_pair<> p;
    test::buffer out(p.pd, 256), in(p.pd, 4 * 256);
    rxa::receive_pool pool{p.d, p.b, in.span(), {.receives = 4, .message_bytes = 256}};
    ::asio::cancellation_signal signal;
    std::error_code first;
    int first_calls = 0;
    pool.async_receive(::asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, rxa::received_message m) {
        first = ec;
        ++first_calls;
        CHECK_FALSE(m);
    }));
    CHECK(pool.waiting() == 1);
    signal.emit(::asio::cancellation_type::terminal);
    test::run_bounded(p.io);
    CHECK(first_calls == 1); // at once: nothing of it was on the device
    CHECK(test::aborted(first));
    CHECK(p.b.state() == IBV_QPS_RTS); // the QP is not touched
    CHECK(pool.waiting() == 0);

    // The message that arrives now waits in the pool for the next async_receive.
    test::fill_pattern(out.bytes_, 9);
    for (std::size_t k = 0; k < 6; ++k) { // more than the pool holds: each is released and its receive posted again
        bool sent = false;
        rxa::async_post(p.d, p.a, rx::send{out.span().first(100 + k)}, [&](std::error_code ec, rx::work_completion) {
            CHECK_FALSE(ec);
            sent = true;
        });
        test::run_bounded(p.io);
        REQUIRE(sent);
        CHECK(pool.ready() == 1);
        std::optional<rxa::received_message> got;
        pool.async_receive([&](std::error_code ec, rxa::received_message m) {
            CHECK_FALSE(ec);
            got = std::move(m);
        });
        test::run_bounded(p.io);
        REQUIRE(got);
        REQUIRE(*got);
        CHECK(got->data().size() == 100 + k);
        CHECK(std::memcmp(got->data().data(), out.bytes_.data(), got->data().size()) == 0);
        CHECK(got->completion().qp_num() == p.b.qp_num());
    } // each message released here: its receive posted again
    CHECK(pool.lost() == 0);

    // A QP in ERR flushes the pool's receives: async_receive says so, with an empty message.
    p.b.to_error();
    std::error_code flushed;
    pool.async_receive([&](std::error_code ec, rxa::received_message m) {
        flushed = ec;
        CHECK_FALSE(m);
    });
    test::run_bounded(p.io);
    CHECK(flushed == rx::make_wc_error_code(IBV_WC_WR_FLUSH_ERR));
    // Every later one too, at once: no receive of the pool will complete again.
    for (int k = 0; k < 8; ++k) {
        std::error_code later;
        pool.async_receive([&](std::error_code ec, rxa::received_message) { later = ec; });
        test::run_bounded(p.io);
        CHECK(later == rx::make_wc_error_code(IBV_WC_WR_FLUSH_ERR));
    }
}

TEST_CASE("asio: co_await (pool.async_receive() || timer) loses no message: 2,000 rounds, a 1 ms bound, "
          "messages 0-2 ms late") {
    using namespace ::asio::experimental::awaitable_operators;
    constexpr std::uint32_t messages = 2'000;
    test::asio_pair<> p;
    test::buffer out(p.pd, 64 * 8), in(p.pd, 64 * 64);
    rxa::receive_pool pool{p.d, p.b, in.span(), {.receives = 64, .message_bytes = 64}};
    std::uint32_t received = 0, timeouts = 0, out_of_order = 0;
    std::exception_ptr failure;
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds{120};

    ::asio::co_spawn(
        p.io,
        [&]() -> ::asio::awaitable<void> { // the sender: message i, 0-2 ms after the last
            ::asio::steady_timer pause{p.io};
            std::mt19937 rng{7};
            for (std::uint32_t i = 0; i < messages; ++i) {
                pause.expires_after(std::chrono::microseconds{rng() % 2'000});
                co_await pause.async_wait(::asio::use_awaitable);
                auto slot = out.span().subspan((i % 8) * 64, 4);
                std::memcpy(out.bytes_.data() + (i % 8) * 64, &i, 4);
                (void)co_await rxa::async_post(p.d, p.a, rx::send{slot}, ::asio::use_awaitable);
            }
        },
        [&](std::exception_ptr e) {
            if (e && !failure) failure = e;
        });
    ::asio::co_spawn(
        p.io,
        [&]() -> ::asio::awaitable<void> { // the receiver: each wait bounded by 1 ms
            ::asio::steady_timer bound{p.io};
            while (received < messages && std::chrono::steady_clock::now() < deadline) {
                bound.expires_after(std::chrono::milliseconds{1});
                auto r =
                    co_await (pool.async_receive(::asio::use_awaitable) || bound.async_wait(::asio::use_awaitable));
                if (r.index() == 1) {
                    ++timeouts;
                    continue;
                }
                rxa::received_message const& m = std::get<0>(r);
                std::uint32_t seq = 0;
                std::memcpy(&seq, m.data().data(), 4);
                if (seq != received) ++out_of_order;
                ++received;
            }
        },
        [&](std::exception_ptr e) {
            if (e && !failure) failure = e;
        });
    p.io.run_for(std::chrono::seconds{150});
    if (failure) std::rethrow_exception(failure);
    MESSAGE(received << " messages received, " << timeouts << " receives timed out, in "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                              (deadline - std::chrono::seconds{120}))
                            .count()
                     << " ms");
    CHECK(received == messages); // every message once: none eaten by a receive that timed out
    CHECK(out_of_order == 0);
    CHECK(timeouts > 0); // the race was run
    CHECK(pool.lost() == 0);
    CHECK(p.b.state() == IBV_QPS_RTS);
}
