#pragma once
/// @file
/// `thread_world` and `thread_bootstrap`: the `bootstrap` concept with threads of one process as
/// the ranks. For tests and single-node tools: a peer group of 64 ranks, or a rank that fails on
/// purpose, without a launcher. Every wait is bounded: a rank that never arrives makes the others
/// throw a `bootstrap_error` whose code is `std::errc::timed_out`, not hang.

#include "rdmacxx/bootstrap/bootstrap.hpp"
#include "rdmacxx/error.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {

namespace detail {
/// What the ranks of a `thread_world` share: one entry per collective in flight, keyed by its
/// sequence number (each rank counts the collectives it has called).
struct thread_world_state {
    struct round {
        char const* call = nullptr;                 // the first caller's collective
        std::size_t bytes = 0;                      // the first caller's input size
        std::vector<std::vector<std::byte>> inputs; // each rank's `in`, copied
        std::vector<bool> present;                  // which ranks have arrived
        int arrived = 0;
        int left = 0;
    };
    int size = 1;
    std::chrono::milliseconds timeout{};
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::uint64_t, round> rounds;
    std::vector<bool> taken; // bootstrap(r) was called
    std::string broken;      // why the world is unusable, empty while it is not
    std::errc broken_code{}; // timed_out (a rank did not arrive) or invalid_argument (ranks disagree)
};
} // namespace detail

class thread_bootstrap;

/// The shared meeting place of `size` ranks that are threads of this process: make one, hand
/// `bootstrap(r)` to the thread that plays rank r. Copying a world shares it.
///
/// Every collective waits at most `timeout` for the other ranks. When one times out, the world
/// is broken for good: that collective and every later one, on every rank, throw a
/// `bootstrap_error` with code `std::errc::timed_out` naming the ranks that did not arrive
/// (rank numbers in [0, size)). A rank whose collective differs from the others' (another
/// collective, or inputs of another size) gets an `argument_error`, and the world is broken too:
/// the ranks waiting in that round, and every later collective, throw a `bootstrap_error` with
/// code `std::errc::invalid_argument`.
/// Thread-safety: every member may be called from any thread.
class thread_world {
public:
    /// A world of `size` ranks (at least 1) whose collectives wait at most `timeout` (positive).
    /// @throws argument_error when `size < 1` or `timeout` is not positive.
    explicit thread_world(int size, std::chrono::milliseconds timeout = std::chrono::seconds{30})
        : state_(std::make_shared<detail::thread_world_state>()) {
        if (size < 1) [[unlikely]]
            detail::throw_argument("thread_world: " + std::to_string(size) + " ranks; at least 1 is needed");
        if (timeout.count() <= 0) [[unlikely]]
            detail::throw_argument("thread_world: the timeout must be positive, not " +
                                   std::to_string(timeout.count()) + " ms");
        state_->size = size;
        state_->timeout = timeout;
        state_->taken.assign(static_cast<std::size_t>(size), false);
    }

    /// The number of ranks.
    [[nodiscard]] int size() const noexcept { return state_->size; }
    /// How long a collective waits for the other ranks.
    [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return state_->timeout; }

    /// The bootstrap of rank `r`, for the thread that plays it; once per rank.
    /// @throws argument_error when `r` is not in [0, size()) or was handed out already.
    [[nodiscard]] thread_bootstrap bootstrap(int r);

private:
    std::shared_ptr<detail::thread_world_state> state_;
};

/// One rank of a `thread_world` (`bootstrap` concept). Move-only; it shares the world, which
/// lives as long as any of its bootstraps.
/// Thread-safety: one thread at a time (the thread playing the rank); ranks run concurrently.
class thread_bootstrap {
public:
    thread_bootstrap(thread_bootstrap const&) = delete;
    thread_bootstrap& operator=(thread_bootstrap const&) = delete;
    /// Takes `other`'s place in the world; `other` is left without one.
    thread_bootstrap(thread_bootstrap&&) noexcept = default;
    /// Takes `other`'s place in the world.
    thread_bootstrap& operator=(thread_bootstrap&&) noexcept = default;
    ~thread_bootstrap() = default;

    /// This thread's rank.
    [[nodiscard]] int rank() const noexcept { return rank_; }
    /// The number of ranks.
    [[nodiscard]] int size() const noexcept { return state_->size; }

    /// Every rank's `in` (the same size on every rank), concatenated in rank order into `out`.
    /// @throws argument_error when `out.size() != in.size() * size()` or the ranks disagree (see
    ///         `thread_world`); bootstrap_error (`std::errc::timed_out`) when a rank did not
    ///         arrive within the world's timeout.
    void allgather(std::span<std::byte const> in, std::span<std::byte> out) {
        detail::check_allgather_sizes("thread_bootstrap::allgather", in.size(), out.size(), size());
        meet("allgather", in, [&](std::vector<std::vector<std::byte>> const& inputs) {
            for (std::size_t r = 0; r < inputs.size(); ++r)
                std::copy(inputs[r].begin(), inputs[r].end(), out.begin() + static_cast<std::ptrdiff_t>(r * in.size()));
        });
    }

    /// Personalised exchange: `in` holds `size()` blocks of equal size, block r for rank r; `out`
    /// (as many bytes as `in`) receives rank r's block for this rank at offset `r × block`.
    /// @throws argument_error when `in.size()` is not a multiple of `size()`, `out.size() !=
    ///         in.size()`, or the ranks disagree; bootstrap_error (`std::errc::timed_out`) as
    ///         `allgather`.
    void alltoall(std::span<std::byte const> in, std::span<std::byte> out) {
        auto const n = static_cast<std::size_t>(size());
        std::size_t const block =
            detail::check_alltoall_sizes("thread_bootstrap::alltoall", in.size(), out.size(), size());
        auto const me = static_cast<std::size_t>(rank_);
        meet("alltoall", in, [&](std::vector<std::vector<std::byte>> const& inputs) {
            for (std::size_t r = 0; r < n; ++r) {
                auto const from = inputs[r].begin() + static_cast<std::ptrdiff_t>(me * block);
                std::copy(from, from + static_cast<std::ptrdiff_t>(block),
                          out.begin() + static_cast<std::ptrdiff_t>(r * block));
            }
        });
    }

    /// Returns once every rank has called it.
    /// @throws bootstrap_error (`std::errc::timed_out`) as `allgather`; argument_error when the
    ///         ranks disagree.
    void barrier() {
        meet("barrier", {}, [](std::vector<std::vector<std::byte>> const&) {});
    }

private:
    friend class thread_world;
    thread_bootstrap(std::shared_ptr<detail::thread_world_state> state, int rank)
        : state_(std::move(state)), rank_(rank) {}

    // Deposits `in` for this rank's next collective, waits (bounded) until every rank has, hands
    // every input to `take`, and frees the round when the last rank has taken its part.
    template <class Take>
    void meet(char const* call, std::span<std::byte const> in, Take&& take) {
        detail::thread_world_state& s = *state_;
        std::string const name = std::string{"thread_bootstrap::"} + call;
        std::unique_lock lock{s.mutex};
        if (!s.broken.empty()) [[unlikely]]
            throw bootstrap_error(name, 0, s.broken, s.broken_code);
        auto& round = s.rounds[sequence_++];
        auto const n = static_cast<std::size_t>(s.size);
        if (round.call == nullptr) {
            round.call = call;
            round.bytes = in.size();
            round.inputs.resize(n);
            round.present.assign(n, false);
        } else if (std::string{round.call} != call || round.bytes != in.size()) [[unlikely]] {
            s.broken = "rank " + std::to_string(rank_) + " called " + call + " with " + std::to_string(in.size()) +
                       " bytes where another rank called " + round.call + " with " + std::to_string(round.bytes);
            s.broken_code = std::errc::invalid_argument;
            s.changed.notify_all();
            detail::throw_argument(name + ": " + s.broken);
        }
        round.inputs[static_cast<std::size_t>(rank_)].assign(in.begin(), in.end());
        round.present[static_cast<std::size_t>(rank_)] = true;
        if (++round.arrived == s.size) s.changed.notify_all();
        bool const all =
            s.changed.wait_for(lock, s.timeout, [&] { return round.arrived == s.size || !s.broken.empty(); });
        if (!all || round.arrived != s.size) [[unlikely]] {
            if (s.broken.empty()) {
                std::string missing;
                for (std::size_t r = 0; r < n; ++r)
                    if (!round.present[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
                s.broken = "rank(s) " + (missing.empty() ? std::string{"?"} : missing) + " did not call " + call +
                           " within " + std::to_string(s.timeout.count()) + " ms";
                s.broken_code = std::errc::timed_out;
                s.changed.notify_all();
            }
            throw bootstrap_error(name, 0, s.broken, s.broken_code);
        }
        take(round.inputs);
        if (++round.left == s.size) s.rounds.erase(sequence_ - 1);
    }

    std::shared_ptr<detail::thread_world_state> state_;
    int rank_ = 0;
    std::uint64_t sequence_ = 0;
};

inline thread_bootstrap thread_world::bootstrap(int r) {
    std::lock_guard lock{state_->mutex};
    if (r < 0 || r >= state_->size) [[unlikely]]
        detail::throw_argument("thread_world::bootstrap: rank " + std::to_string(r) + " is not in [0, " +
                               std::to_string(state_->size) + ")");
    if (state_->taken[static_cast<std::size_t>(r)]) [[unlikely]]
        detail::throw_argument("thread_world::bootstrap: rank " + std::to_string(r) + " was handed out already");
    state_->taken[static_cast<std::size_t>(r)] = true;
    return thread_bootstrap{state_, r};
}

static_assert(bootstrap<thread_bootstrap>);

} // namespace v0
} // namespace rdmacxx
