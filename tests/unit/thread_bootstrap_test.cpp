// The in-process bootstrap (rdmacxx/bootstrap/threads.hpp): threads as ranks, every wait bounded.
#include "rdmacxx/bootstrap/threads.hpp"

#include "device/bootstrap_support.hpp" // run_ranks (no device needed)

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace {
namespace rx = rdmacxx;

using test::run_ranks;

std::byte b(std::size_t v) { return static_cast<std::byte>(v & 0xff); }
} // namespace

TEST_CASE("thread_bootstrap: allgather in rank order, alltoall by column, barrier, repeated") {
    constexpr std::size_t n = 7;
    rx::thread_world world{static_cast<int>(n), std::chrono::seconds{20}};
    std::vector<std::vector<std::byte>> gathered(n), received(n);
    auto errors = run_ranks(world, [&](rx::thread_bootstrap& boot) {
        auto const me = static_cast<std::size_t>(boot.rank());
        REQUIRE(boot.size() == static_cast<int>(n));
        for (int round = 0; round < 3; ++round) { // rounds in a row reuse nothing of each other
            std::array<std::byte, 3> mine{b(0xab), b(me), b(static_cast<std::size_t>(round))};
            std::vector<std::byte> all(3 * n);
            boot.allgather(mine, all);
            std::vector<std::byte> blocks(2 * n), column(2 * n);
            for (std::size_t to = 0; to < n; ++to) {
                blocks[2 * to] = b(me);
                blocks[2 * to + 1] = b(to * 16 + static_cast<std::size_t>(round));
            }
            boot.alltoall(blocks, column);
            boot.barrier();
            gathered[me] = all;
            received[me] = column;
        }
    });
    for (std::size_t r = 0; r < n; ++r) {
        CHECK_FALSE(errors[r]);
        for (std::size_t from = 0; from < n; ++from) {
            CHECK(gathered[r][3 * from + 1] == b(from));
            CHECK(gathered[r][3 * from + 2] == b(2));
            CHECK(received[r][2 * from] == b(from));           // from rank `from`
            CHECK(received[r][2 * from + 1] == b(r * 16 + 2)); // the block meant for r
        }
    }
}

TEST_CASE("thread_bootstrap: a rank that never arrives makes the others throw timed_out, naming it") {
    rx::thread_world world{4, std::chrono::milliseconds{300}};
    auto const start = std::chrono::steady_clock::now();
    std::vector<std::chrono::steady_clock::duration> second_took(4);
    auto errors = run_ranks(world, [&](rx::thread_bootstrap& boot) {
        if (boot.rank() == 2) return; // never calls the barrier
        try {
            boot.barrier();
        } catch (rx::bootstrap_error const&) {
            auto const t = std::chrono::steady_clock::now();
            try {
                boot.barrier(); // the world is broken for good: throws at once
            } catch (rx::bootstrap_error const&) {
                second_took[static_cast<std::size_t>(boot.rank())] = std::chrono::steady_clock::now() - t;
            }
            throw;
        }
    });
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds{10});
    CHECK_FALSE(errors[2]);
    for (int r : {0, 1, 3}) {
        REQUIRE(errors[static_cast<std::size_t>(r)]);
        try {
            std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
        } catch (rx::bootstrap_error const& e) {
            CHECK(e.code() == std::errc::timed_out);
            CHECK(e.call() == "thread_bootstrap::barrier");
            CHECK(std::string{e.what()}.find("rank(s) 2 did not call barrier") != std::string::npos);
        }
        CHECK(second_took[static_cast<std::size_t>(r)] < std::chrono::milliseconds{100});
    }
}

TEST_CASE("thread_bootstrap: bad input and disagreeing ranks are refused") {
    CHECK_THROWS_AS(rx::thread_world(0), rx::argument_error);
    CHECK_THROWS_AS(rx::thread_world(2, std::chrono::milliseconds{0}), rx::argument_error);
    rx::thread_world world{2, std::chrono::seconds{5}};
    {
        auto boot = world.bootstrap(1);
        CHECK_THROWS_AS((void)world.bootstrap(1), rx::argument_error); // handed out already
        CHECK_THROWS_AS((void)world.bootstrap(2), rx::argument_error);
        std::array<std::byte, 3> in{};
        std::array<std::byte, 5> wrong{};
        CHECK_THROWS_AS(boot.allgather(in, wrong), rx::argument_error); // refused before any wait
        CHECK_THROWS_AS(boot.alltoall(in, wrong), rx::argument_error);
    }
    rx::thread_world other{2, std::chrono::seconds{5}};
    auto errors = run_ranks(other, [&](rx::thread_bootstrap& boot) {
        std::array<std::byte, 4> in{}, out{};
        if (boot.rank() == 0)
            boot.barrier();
        else
            boot.alltoall(in, out);
    });
    // Whichever arrived second saw the other's collective and says so; the first is woken by it.
    int refused = 0;
    for (auto const& e : errors) {
        REQUIRE(e);
        try {
            std::rethrow_exception(e);
        } catch (rx::argument_error const&) {
            ++refused;
        } catch (rx::bootstrap_error const& woken) {
            CHECK(woken.code() == std::errc::invalid_argument);
        }
    }
    CHECK(refused == 1);
}
