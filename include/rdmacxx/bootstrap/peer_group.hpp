#pragma once
/// @file
/// `peer_group<Completion>`: every rank of a bootstrap connected to every other by an RC QP
/// (and, when asked, reachable through one UD QP and an address handle per peer), with each
/// rank's exposed `remote_span` known to all. Engine-free: it takes any `bootstrap`.

#include "rdmacxx/ah.hpp"
#include "rdmacxx/bootstrap/bootstrap.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/detail/wire.hpp"
#include "rdmacxx/end_port.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/transport.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {

/// How a `peer_group` builds its QPs.
struct peer_group_options {
    qp_capabilities caps{}; ///< queue sizes of every RC QP (and of the UD QP)
    /// The attributes of every RC QP, and the Q_Key of the UD QP (qp_settings.hpp: the same
    /// type and defaults as `queue_pair::connect` and the CM's). Remote access is granted only
    /// as asked: set `settings.remote_access` (e.g. `access::remote_write`) for peers to write,
    /// read or run atomics on the spans the ranks expose.
    qp_settings settings{};
    bool with_ud = false; ///< also one UD QP per rank and an address handle per peer
};

namespace detail {
/// The header of a peer group's allgather blob: magic "RXPG", the wire version, then the group
/// size and the flags (bit 0: with UD), big-endian, so that ranks built with other options or
/// another rdmacxx are told apart instead of misreading each other.
struct peer_group_header {
    static constexpr std::array<char, 4> magic{'R', 'X', 'P', 'G'};
    static constexpr std::size_t bytes = 16;
    std::uint32_t size = 0;
    std::uint32_t flags = 0;

    void write(std::byte* out) const noexcept {
        wire::put_header(out, magic);
        wire::put<4>(out + 8, size);
        wire::put<4>(out + 12, flags);
    }
    static peer_group_header read(std::span<std::byte const> in) {
        if (std::string why = wire::header_fault(in, bytes, magic, "a peer group's bootstrap blob"); !why.empty())
            [[unlikely]]
            throw_argument(std::move(why));
        return {static_cast<std::uint32_t>(wire::get<4>(in.data() + 8)),
                static_cast<std::uint32_t>(wire::get<4>(in.data() + 12))};
    }
};
} // namespace detail

/// A full mesh of RC QPs over the ranks of a bootstrap (`bootstrap` concept: MPI through
/// `rdmacxx/bootstrap/mpi.hpp`, or any engine): rank r holds one RC QP per other rank, connected
/// to that rank's QP for r, and knows the `remote_span` each rank exposed. With
/// `peer_group_options::with_ud` each rank also holds one UD QP and an address handle to every
/// other rank's UD QP.
///
/// The constructor is collective: every rank of the bootstrap constructs its group with the same
/// options, and it does one allgather. The QPs are connected (RTS) when it returns; a rank must
/// post its receives before a peer sends to it, so the usual order is: construct, post receives,
/// `boot.barrier()`, then send.
///
/// The group's QPs and address handles are made in `pd` and on the CQs and `port`'s context,
/// which must outlive it (the device refuses to free them while its QPs exist); they may move
/// meanwhile: the QPs follow them through their cells (see docs/ownership.md). Move-only: its
/// QPs and address handles are its own and independent of each other, so a move keeps them
/// where they are (what refers to a QP of the group follows it) and a move assignment destroys
/// the QPs held, then the address handles.
/// Thread-safety: as for each QP it holds; the accessors are safe from several threads.
/// @see ibv_modify_qp(3), ibv_create_ah(3)
template <completion_strategy Completion>
class peer_group {
public:
    /// The RC QP type of the mesh.
    using rc_queue_pair = queue_pair<rc, Completion>;
    /// The UD QP type.
    using ud_queue_pair = queue_pair<ud, Completion>;

    /// Creates one RC QP per other rank (and one UD QP), exchanges their endpoints and `exposed`
    /// through `boot.allgather`, and connects every RC QP; on `port`, in `pd`, with completions
    /// to `send_cq` and `recv_cq` (they may be the same CQ, and must hold the completions of all
    /// the group's QPs).
    /// @throws argument_error when the ranks' blobs disagree (built with other options, another
    ///         rdmacxx version, or corrupt); sys_error when a QP cannot be created or connected;
    ///         whatever the bootstrap throws.
    template <bootstrap Bootstrap>
    peer_group(Bootstrap& boot, end_port const& port, protection_domain& pd, completion_queue<Completion>& send_cq,
               completion_queue<Completion>& recv_cq, remote_span<std::byte> exposed = {},
               peer_group_options const& opt = {})
        : rank_(static_cast<int>(boot.rank())), size_(static_cast<int>(boot.size())) {
        if (size_ < 1 || rank_ < 0 || rank_ >= size_) [[unlikely]]
            detail::throw_argument("peer_group: the bootstrap says rank " + std::to_string(rank_) + " of " +
                                   std::to_string(size_));
        auto const n = static_cast<std::size_t>(size_);
        qps_.resize(n);
        for (std::size_t r = 0; r < n; ++r)
            if (r != static_cast<std::size_t>(rank_)) qps_[r].emplace(pd, send_cq, recv_cq, opt.caps);
        if (opt.with_ud) {
            ud_qp_.emplace(pd, send_cq, recv_cq, opt.caps);
            ud_qp_->activate(port, opt.settings);
        }

        // This rank's blob: header, the endpoint of its QP for each rank (zeros for itself), the
        // span it exposes, and its UD QP's endpoint.
        std::size_t const blob = blob_bytes(n, opt.with_ud);
        std::vector<std::byte> mine(blob);
        detail::peer_group_header{static_cast<std::uint32_t>(n), opt.with_ud ? 1U : 0U}.write(mine.data());
        std::byte* at = mine.data() + detail::peer_group_header::bytes;
        for (std::size_t r = 0; r < n; ++r, at += endpoint_bytes)
            if (qps_[r]) put(at, qps_[r]->local_endpoint(port).to_bytes());
        put(at, exposed.to_bytes());
        at += span_bytes;
        if (ud_qp_) put(at, ud_qp_->local_endpoint(port).to_bytes());

        std::vector<std::byte> all(blob * n);
        boot.allgather(std::span<std::byte const>{mine}, std::span<std::byte>{all});

        remotes_.resize(n);
        if (ud_qp_) {
            ud_remotes_.resize(n);
            ahs_.resize(n);
        }
        for (std::size_t r = 0; r < n; ++r) {
            std::byte const* theirs = all.data() + r * blob;
            auto const header = detail::peer_group_header::read(std::span<std::byte const>{theirs, blob});
            if (header.size != n || header.flags != (opt.with_ud ? 1U : 0U)) [[unlikely]]
                detail::throw_argument(
                    "peer_group: rank " + std::to_string(r) + " built its group for " + std::to_string(header.size) +
                    " ranks" + (header.flags != 0 ? " with UD" : " without UD") + ", rank " + std::to_string(rank_) +
                    " for " + std::to_string(n) + (opt.with_ud ? " with UD" : " without UD"));
            std::byte const* slots = theirs + detail::peer_group_header::bytes;
            remotes_[r] =
                remote_span<std::byte>::from_bytes(std::span<std::byte const>{slots + n * endpoint_bytes, span_bytes});
            if (r == static_cast<std::size_t>(rank_)) continue;
            endpoint const mine_at_theirs = endpoint::from_bytes(
                std::span<std::byte const>{slots + static_cast<std::size_t>(rank_) * endpoint_bytes, endpoint_bytes});
            qps_[r]->connect(port, mine_at_theirs, opt.settings);
            if (ud_qp_) {
                endpoint const ud_remote = endpoint::from_bytes(
                    std::span<std::byte const>{slots + n * endpoint_bytes + span_bytes, endpoint_bytes});
                ud_remotes_[r] = ud_remote.qpn;
                ahs_[r].emplace(pd, port, ud_remote.lid, ud_remote.gid,
                                address_qos{.service_level = opt.settings.service_level.value_or(0),
                                            .hop_limit = opt.settings.hop_limit.value_or(64),
                                            .traffic_class = opt.settings.traffic_class.value_or(0),
                                            .flow_label = opt.settings.flow_label.value_or(0)});
            }
        }
        qkey_ = opt.settings.qkey;
    }

    peer_group(peer_group const&) = delete;
    peer_group& operator=(peer_group const&) = delete;
    /// Takes over `other`'s QPs, address handles and what it learned of the peers; `other` is
    /// left empty (only destruction and assignment are valid on it).
    peer_group(peer_group&&) noexcept = default;
    /// Destroys the QPs and address handles held, then takes over `other`'s.
    peer_group& operator=(peer_group&&) noexcept = default;
    /// Destroys the address handles and the QPs.
    ~peer_group() = default;

    /// This process's rank.
    [[nodiscard]] int rank() const noexcept { return rank_; }
    /// The number of ranks.
    [[nodiscard]] int size() const noexcept { return size_; }

    /// The RC QP connected to `peer`.
    /// @throws argument_error when `peer` is this rank or not in [0, size()).
    [[nodiscard]] rc_queue_pair& qp(int peer) {
        check_peer(peer, "qp");
        return *qps_[static_cast<std::size_t>(peer)];
    }
    /// The span rank `r` exposed (this rank's own for `r == rank()`; empty where a rank exposed
    /// none).
    /// @throws argument_error when `r` is not in [0, size()).
    [[nodiscard]] remote_span<std::byte> remote(int r) const {
        if (r < 0 || r >= size_) [[unlikely]]
            detail::throw_argument("peer_group::remote: rank " + std::to_string(r) + " is not in [0, " +
                                   std::to_string(size_) + ")");
        return remotes_[static_cast<std::size_t>(r)];
    }

    /// True when the group was built `with_ud`.
    [[nodiscard]] bool has_ud() const noexcept { return ud_qp_.has_value(); }
    /// This rank's UD QP. @throws argument_error when the group has no UD QP.
    [[nodiscard]] ud_queue_pair& ud_qp() {
        if (!ud_qp_) [[unlikely]]
            detail::throw_argument("peer_group::ud_qp: the group was built without with_ud");
        return *ud_qp_;
    }
    /// The address handle to `peer`'s UD QP.
    /// @throws argument_error when the group has no UD QP, or `peer` is this rank or out of range.
    [[nodiscard]] address_handle const& ah(int peer) const {
        check_ud_peer(peer, "ah");
        return *ahs_[static_cast<std::size_t>(peer)];
    }
    /// `peer`'s UD QPN.
    /// @throws argument_error as `ah()`.
    [[nodiscard]] std::uint32_t ud_qpn(int peer) const {
        check_ud_peer(peer, "ud_qpn");
        return ud_remotes_[static_cast<std::size_t>(peer)];
    }
    /// The Q_Key of every UD QP of the group.
    [[nodiscard]] std::uint32_t qkey() const noexcept { return qkey_; }

private:
    static constexpr std::size_t endpoint_bytes = endpoint::wire_size;
    static constexpr std::size_t span_bytes = remote_span<std::byte>::wire_size;

    static constexpr std::size_t blob_bytes(std::size_t n, bool with_ud) noexcept {
        return detail::peer_group_header::bytes + n * endpoint_bytes + span_bytes + (with_ud ? endpoint_bytes : 0);
    }

    template <std::size_t N>
    static void put(std::byte* out, std::array<std::byte, N> const& bytes) noexcept {
        std::memcpy(out, bytes.data(), N);
    }

    void check_peer(int peer, char const* what) const {
        if (peer < 0 || peer >= size_ || peer == rank_) [[unlikely]]
            detail::throw_argument(std::string{"peer_group::"} + what + ": rank " + std::to_string(peer) +
                                   (peer == rank_ ? " is this rank" : " is not in [0, " + std::to_string(size_) + ")"));
    }
    void check_ud_peer(int peer, char const* what) const {
        if (!ud_qp_) [[unlikely]]
            detail::throw_argument(std::string{"peer_group::"} + what + ": the group was built without with_ud");
        check_peer(peer, what);
    }

    int rank_;
    int size_;
    std::vector<std::optional<rc_queue_pair>> qps_;
    std::vector<remote_span<std::byte>> remotes_;
    std::optional<ud_queue_pair> ud_qp_;
    std::vector<std::optional<address_handle>> ahs_;
    std::vector<std::uint32_t> ud_remotes_;
    std::uint32_t qkey_ = 0;
};

} // namespace v0
} // namespace rdmacxx
