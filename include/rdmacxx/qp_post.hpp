#pragma once
/// @file
/// The pieces of a queue pair's post path that do not depend on the QP: `post_result`, the
/// out-of-line throws of a refused post, and the building of a chain of `ibv_send_wr` or
/// `ibv_recv_wr` on the stack from typed requests. Part of `queue_pair` (qp.hpp), which users
/// include.

#include "rdmacxx/detail/verbs.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/transport.hpp"
#include "rdmacxx/wr.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

/// The outcome of a non-throwing post: `error` is 0 or an errno value, `bad_index` the
/// position of the first request not posted.
struct [[nodiscard]] post_result {
    int error = 0;             ///< 0 on success, else the errno value
    std::size_t bad_index = 0; ///< the first request of the chain that was not posted
    /// True on success.
    explicit operator bool() const noexcept { return error == 0; }
};

namespace detail {
/// A compare-and-swap or fetch-and-add request type.
template <class W>
concept atomic_request = W::opcode == IBV_WR_ATOMIC_CMP_AND_SWP || W::opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;

[[noreturn]] RDMACXX_COLD inline void throw_post(int err, char const* verb, std::size_t bad_index, std::uint64_t wr_id,
                                                 int opcode, std::uint32_t qpn) {
    throw wr_error(err, verb, bad_index, wr_id, opcode, qpn);
}

[[noreturn]] RDMACXX_COLD inline void throw_refused(char const* reason, char const* op, std::uint64_t bytes,
                                                    std::uint32_t limit, std::size_t index, std::uint32_t qpn) {
    argument_error e(std::string{op} + " of " + std::to_string(bytes) + " bytes " + reason + " (" +
                     std::to_string(limit) + " bytes)");
    e.push_context("refusing work request " + std::to_string(index) + " of the chain posted to QP " +
                   std::to_string(qpn) + "; nothing was posted");
    throw e;
}

/// A request with an effect to apply once the device has taken it (`bind_mw`: its window's new
/// rkey and span). `queue_pair::post` and `try_post` call `posted()` on each such request of a
/// chain that was posted, and on none that was not.
template <class W>
concept has_posted_effect = requires(W const& w) {
    w.posted();
};
template <class... Wrs>
inline constexpr bool any_posted_effect = (has_posted_effect<Wrs> || ...);
template <class W>
void apply_posted_one(W const& w, bool was_posted) noexcept {
    if constexpr (has_posted_effect<W>)
        if (was_posted) w.posted();
}
// The effects of the first `n` requests of a chain (all of them when `n` is at least its length).
template <class... Wrs>
void apply_posted(std::size_t n, Wrs const&... wrs) noexcept {
    std::size_t i = 0;
    (apply_posted_one(wrs, i++ < n), ...);
}
// The effects of requests [from, to) of a span posted in chunks.
template <class W>
void apply_posted_span(std::span<W const> wrs, std::size_t from, std::size_t to) noexcept {
    if constexpr (has_posted_effect<W>)
        for (std::size_t i = from; i < to && i < wrs.size(); ++i)
            wrs[i].posted();
}

// Building a chain. The chain's scatter-gather entries are copied into an array beside it, and the WRs point
// there rather than into the typed requests: the typed requests then never escape to the
// provider, so the compiler keeps their fields in registers and writes only the verbs
// structures, as hand-written code does (no dead copy of each request on the stack).
template <class... Wrs>
inline constexpr std::size_t sge_total = (std::size_t{0} + ... + Wrs::sge_count);
template <std::size_t S, std::size_t K>
RDMACXX_HOT inline ibv_sge* copy_sges(std::array<ibv_sge, S>& sges, std::size_t& at,
                                      std::span<ibv_sge const, K> from) noexcept {
    ibv_sge* const first = sges.data() + at;
    for (std::size_t k = 0; k < K; ++k) { // field by field: GCC then stores each from its register
        first[k].addr = from[k].addr;
        first[k].length = from[k].length;
        first[k].lkey = from[k].lkey;
    }
    at += K;
    return first;
}
template <transport Transport, std::size_t N, std::size_t S, class... Wrs>
RDMACXX_HOT inline void link_send(std::array<ibv_send_wr, N>& chain, std::array<ibv_sge, S>& sges,
                                  Wrs const&... wrs) noexcept {
    [&]<std::size_t... I>(std::index_sequence<I...>) __attribute__((always_inline)) {
        std::size_t at = 0;
        // No zeroing: build() sets every field a provider reads for the operation (the
        // memory-window and TSO members, 48 of the 128 bytes, only bind_mw writes and reads).
        ((wrs.template build<Transport>(chain[I]), chain[I].sg_list = copy_sges(sges, at, wrs.sges()),
          chain[I].next = I + 1 < N ? &chain[I + 1] : nullptr),
         ...);
    }
    (std::make_index_sequence<N>{});
}
template <std::size_t N, std::size_t S, class... Wrs>
RDMACXX_HOT inline void link_recv(std::array<ibv_recv_wr, N>& chain, std::array<ibv_sge, S>& sges,
                                  Wrs const&... wrs) noexcept {
    [&]<std::size_t... I>(std::index_sequence<I...>) __attribute__((always_inline)) {
        std::size_t at = 0;
        ((wrs.build(chain[I]), chain[I].sg_list = copy_sges(sges, at, wrs.sges()),
          chain[I].next = I + 1 < N ? &chain[I + 1] : nullptr),
         ...);
    }
    (std::make_index_sequence<N>{});
}
// The index of `bad` among the first `n` requests of `chain`, 0 when it is none of them.
template <class Wr, std::size_t N>
std::size_t index_of(std::array<Wr, N> const& chain, std::size_t n, Wr const* bad) noexcept {
    for (std::size_t i = 0; i < n && i < N; ++i)
        if (&chain[i] == bad) return i;
    return 0;
}

// The wr_id and opcode of a chain's first request, for the error of a refused post.
template <class W, class... Rest>
std::uint64_t first_wr_id(W const& w, Rest const&...) noexcept {
    return w.wr_id();
}
template <class W, class...>
constexpr int first_opcode() noexcept {
    return W::opcode;
}
/// The opcode of a chain's request for wr_error: -1 for a receive.
template <class Wr>
constexpr int opcode_of(Wr const& wr) noexcept {
    if constexpr (std::is_same_v<Wr, ibv_send_wr>)
        return wr.opcode;
    else
        return -1;
}
} // namespace detail

} // namespace v0
} // namespace rdmacxx
