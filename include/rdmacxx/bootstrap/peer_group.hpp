#pragma once
/// @file
/// `peer_group<Completion>`: every rank of a bootstrap connected to every other by an RC QP
/// (and, when asked, reachable through one UD QP and an address handle per peer), with each
/// rank's exposed `remote_span`s known to all. Engine-free: it takes any `bootstrap`.

#include "rdmacxx/ah.hpp"
#include "rdmacxx/bootstrap/bootstrap.hpp"
#include "rdmacxx/bootstrap/first_use.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/detail/wire.hpp"
#include "rdmacxx/end_port.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/transport.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
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
    /// Also an RC QP connected to itself, `qp(rank())`, so that a rank reaches its own exposed span
    /// (a write, a read, an atomic on its own counter) and its own receives the way it reaches any
    /// rank's. A rank's own choice: ranks may differ.
    bool loopback = false;
    /// Make each RC QP only when this rank first asks for it (`qp(r)`), through a handshake with
    /// rank r over one UD QP per rank (the control QP), instead of one per peer at construction:
    /// a rank that talks to a few neighbours holds a few QPs. A rank answers its peers'
    /// handshakes while it calls into the group (`qp()`, `progress()`), so a rank that waits
    /// elsewhere for a peer's first message calls `progress()` in its loop. Every rank of the
    /// group must choose alike. With `loopback`, the QP to itself is made at construction.
    bool connect_on_first_use = false;
    /// With `connect_on_first_use`, how long `qp(r)` waits for rank r's side of the handshake
    /// before it throws `peer_connect_error` (`std::errc::timed_out`), in milliseconds.
    std::chrono::milliseconds first_use_timeout{10'000};
};

/// Every rank's construction of a `peer_group` failed together, because one or more ranks could
/// not set up their part (create a QP, decode a peer's record, connect, make an address handle).
/// Every rank of the group throws it, with the same list of failed ranks and their reasons, so
/// that no rank is left with a half-connected group or waiting on a peer that gave up.
///
/// `what()` and `dump_detailed` give the summary on top and each failed rank's reason below it;
/// `failures()` lists them; on a rank that failed itself, `local_error()` holds the original
/// exception (a `sys_error`, `argument_error`, …), which `dump_detailed` at level 2 prints too.
/// Its code is `std::errc::connection_aborted`. Thread-safety: as any exception object; copies
/// share the list of failures.
class peer_group_error : public error {
public:
    /// One rank that failed, and why (its error's `what()`; a peer's reason is cut to
    /// `reason_bytes` bytes on the wire).
    struct failure {
        int rank = 0;       ///< the rank that failed
        std::string reason; ///< what failed there, e.g. "creating its QPs: ibv_create_qp failed …"
    };

    /// @param rank      the rank throwing it
    /// @param failures  the ranks that failed, in rank order (at least one)
    /// @param local     this rank's own exception when it is among them, else null
    peer_group_error(int rank, std::vector<failure> failures, std::exception_ptr local)
        : error(std::make_error_code(std::errc::connection_aborted), lowest(failures)),
          failures_(std::make_shared<std::vector<failure> const>(std::move(failures))), local_(std::move(local)) {
        auto const& f = *failures_;
        for (std::size_t i = f.size() - 1; i-- > 0;)
            push_context(describe(f[i]));
        std::string ranks;
        for (auto const& x : f)
            ranks += (ranks.empty() ? "" : ", ") + std::to_string(x.rank);
        push_context("peer_group on rank " + std::to_string(rank) + ": the group was not made on any rank: rank" +
                     (f.size() > 1 ? "s " : " ") + ranks + " failed");
    }

    /// The ranks that failed, in rank order, with their reasons.
    [[nodiscard]] std::span<failure const> failures() const noexcept { return *failures_; }
    /// This rank's own exception when it failed itself, else null.
    [[nodiscard]] std::exception_ptr local_error() const noexcept { return local_; }

    /// Bytes of a reason on the wire; longer ones are cut.
    static constexpr std::size_t reason_bytes = 504;

protected:
    void dump_attributes(std::ostream& os, std::string const& lead) const override {
        for (auto const& f : *failures_)
            os << lead << "rank " << f.rank << ": " << f.reason << '\n';
        if (!local_) return;
        try {
            std::rethrow_exception(local_);
        } catch (error const& e) {
            e.dump_detailed(os, lead + "this rank:", 2);
        } catch (...) {}
    }

private:
    static std::string describe(failure const& f) { return "rank " + std::to_string(f.rank) + ": " + f.reason; }
    static std::string lowest(std::vector<failure> const& f) {
        return f.empty() ? std::string{"no rank named"} : describe(f.back());
    }

    std::shared_ptr<std::vector<failure> const> failures_;
    std::exception_ptr local_;
};

/// The spans of registered memory a rank exposes to its group: none (the default: peers see an
/// empty span), one (a `remote_span<std::byte>` converts to it), or several, indexed from 0
/// (`{a, b, c}`, or a `std::span` of them), all in the group's one exchange. Every rank of a
/// group exposes the same number of spans (1 … 65,535); `peer_group::remote(r, i)` is rank r's
/// span i. Thread-safety: a value type.
class exposed_spans {
public:
    /// None: each peer sees one empty span.
    exposed_spans() : spans_(1) {}
    /// One span, `remote(r)` to the peers.
    exposed_spans(remote_span<std::byte> one)
        : spans_{one} {} // NOLINT(google-explicit-constructor): one span reads as one
    /// Several spans, `remote(r, 0)` … in this order (an empty list is as none).
    exposed_spans(std::initializer_list<remote_span<std::byte>> several)
        : exposed_spans(std::span<remote_span<std::byte> const>{several.begin(), several.size()}) {}
    /// Several spans, `remote(r, 0)` … in this order (an empty span is as none).
    /// @throws argument_error for more than 65,535 spans.
    explicit exposed_spans(std::span<remote_span<std::byte> const> several) : spans_(several.begin(), several.end()) {
        if (spans_.empty()) spans_.resize(1);
        if (spans_.size() > 0xffffU) [[unlikely]]
            detail::throw_argument("peer_group: " + std::to_string(spans_.size()) +
                                   " exposed spans; a rank exposes at most 65535");
    }
    /// The spans (at least one).
    [[nodiscard]] std::span<remote_span<std::byte> const> spans() const noexcept { return spans_; }

private:
    std::vector<remote_span<std::byte>> spans_;
};

namespace detail {
/// The header every rank sends every rank first (an allgather, 16 bytes whatever the options)
/// when a peer group is made:
///
/// | offset | bytes | field |
/// |---|---|---|
/// | 0 | 4 | magic `"RXPG"` |
/// | 4 | 1 | version, 1 |
/// | 5 | 1 | status: 0 ready, 1 failed (the reason follows in the status round) |
/// | 6 | 2 | k, the number of exposed spans (at least 1) |
/// | 8 | 4 | group size |
/// | 12 | 4 | flags: bit 0 with UD, bit 1 connections on first use |
///
/// Only when every header was read, says ready and matches every other: each rank's record (an
/// allgather: its k `remote_span`s, 32 bytes each, then its UD QP's `endpoint`, 32 bytes, with UD
/// only, then its control QP's `endpoint`, 32 bytes, with connections on first use only) and,
/// unless on first use, each rank's endpoint for each rank r, to r only (an alltoall, 32 bytes
/// per rank).
/// Last, always, a status record (an allgather, 8 bytes: magic `"RXPS"`, version, status, 2
/// reserved); when any rank failed, a reason record follows (an allgather, 512 bytes: magic
/// `"RXPF"`, version, reserved, 2-byte length, 504 bytes of text).
struct peer_group_header {
    static constexpr std::array<char, 4> magic{'R', 'X', 'P', 'G'};
    static constexpr std::size_t bytes = 16;
    std::uint32_t size = 0;
    std::uint32_t flags = 0;
    bool failed = false;
    std::size_t spans = 1;

    void write(std::byte* out) const noexcept {
        wire::put_header(out, magic);
        wire::put<1>(out + 5, failed ? 1U : 0U);
        wire::put<2>(out + 6, spans);
        wire::put<4>(out + 8, size);
        wire::put<4>(out + 12, flags);
    }
    static peer_group_header read(std::span<std::byte const> in) {
        if (std::string why = wire::header_fault(in, bytes, magic, "a peer group's record"); !why.empty()) [[unlikely]]
            throw_argument(std::move(why));
        if (wire::get<1>(in.data() + 5) > 1) [[unlikely]]
            throw_argument(wire::reserved_fault("a peer group's record", "the status"));
        return {static_cast<std::uint32_t>(wire::get<4>(in.data() + 8)),
                static_cast<std::uint32_t>(wire::get<4>(in.data() + 12)), wire::get<1>(in.data() + 5) == 1,
                static_cast<std::size_t>(wire::get<2>(in.data() + 6))};
    }
};

/// The status round of a peer group's construction (see `peer_group_header`).
struct peer_group_status {
    static constexpr std::array<char, 4> magic{'R', 'X', 'P', 'S'};
    static constexpr std::size_t bytes = 8;
    static constexpr std::array<char, 4> reason_magic{'R', 'X', 'P', 'F'};
    static constexpr std::size_t reason_record = 8 + peer_group_error::reason_bytes;

    static void write(std::byte* out, bool failed) noexcept {
        wire::put_header(out, magic);
        wire::put<1>(out + 5, failed ? 1U : 0U);
    }
    /// True when the record says its rank failed; a record that cannot be read counts as failed.
    [[nodiscard]] static bool failed(std::span<std::byte const> in) noexcept {
        return !wire::header_fault(in, bytes, magic, "a peer group's status").empty() ||
               wire::get<1>(in.data() + 5) != 0;
    }
    static void write_reason(std::byte* out, std::string_view reason) noexcept {
        std::size_t const n = std::min(reason.size(), peer_group_error::reason_bytes);
        wire::put_header(out, reason_magic);
        wire::put<2>(out + 6, n);
        std::memcpy(out + 8, reason.data(), n);
    }
    [[nodiscard]] static std::string read_reason(std::span<std::byte const> in) {
        if (std::string why = wire::header_fault(in, reason_record, reason_magic, "a peer group's failure reason");
            !why.empty()) [[unlikely]]
            return why;
        std::size_t const n = std::min<std::size_t>(wire::get<2>(in.data() + 6), peer_group_error::reason_bytes);
        return std::string{reinterpret_cast<char const*>(in.data() + 8), n};
    }
};
} // namespace detail

/// A full mesh of RC QPs over the ranks of a bootstrap (`bootstrap` concept: MPI through
/// `rdmacxx/bootstrap/mpi.hpp`, threads through `rdmacxx/bootstrap/threads.hpp`, or any engine):
/// rank r holds one RC QP per other rank, connected to that rank's QP for r (and, with
/// `peer_group_options::loopback`, one connected to itself), and knows the `remote_span` each
/// rank exposed. With `peer_group_options::connect_on_first_use` it holds only the RC QPs to the
/// ranks it asked for (`qp(r)`), each made by a handshake with r over one control UD QP per rank
/// (`rdmacxx/bootstrap/first_use.hpp`): a stencil or a ring holds a few QPs instead of n − 1. With
/// `peer_group_options::with_ud` each rank also holds one UD QP and an address handle to every other rank's UD QP.
///
/// The constructor is collective and all or nothing: every rank of the bootstrap constructs its
/// group with the same options, and every rank takes part in every exchange whatever fails
/// locally. Either every rank returns a connected group (RTS; on first use, its control QP up
/// and the RC QPs to come), or every rank throws the same `peer_group_error` naming the ranks
/// that failed and why. A rank must post its receives before a peer sends to it, so the usual
/// order is: construct, post receives (on first use: `qp(r)` for each peer that will send,
/// then post), `boot.barrier()`, send.
///
/// What each rank receives, for n ranks exposing k spans each (see docs/multi-node.md): n
/// headers of 16 bytes and n records of 32 k bytes (+ 32 with UD, + 32 on first use) by
/// allgather, one 32-byte endpoint from each rank by alltoall (none on first use), and n status
/// records of 8 bytes by allgather: O(n) bytes per rank (plus n reasons of 512 bytes when a
/// rank failed). Ranks built with other options
/// (size, UD, number of spans) are told apart by the headers, before any exchange whose size
/// depends on them, and fail the group like any other failure.
///
/// The group's QPs and address handles are made in `pd` and on the CQs and `port`'s context,
/// which must outlive it (the device refuses to free them while its QPs exist); they may move
/// meanwhile: the QPs follow them through their cells (see docs/ownership.md). Move-only: its
/// QPs and address handles are its own and independent of each other, so a move keeps them
/// where they are (what refers to a QP of the group follows it) and a move assignment destroys
/// the QPs held, then the address handles.
/// Thread-safety: as for each QP it holds; the accessors are safe from several threads. On first
/// use, `qp()` and `progress()` make, connect and reset RC QPs on the user's CQs from the calling
/// thread (handshakes serialise on one mutex): with `checked` QPs, call them from the thread that
/// polls those CQs.
/// @see ibv_modify_qp(3), ibv_create_ah(3), MPI_Allgather(3), MPI_Alltoall(3)
template <completion_strategy Completion>
class peer_group {
public:
    /// The RC QP type of the mesh.
    using rc_queue_pair = queue_pair<rc, Completion>;
    /// The UD QP type.
    using ud_queue_pair = queue_pair<ud, Completion>;

    /// Creates one RC QP per other rank (and one UD QP), exchanges headers, then the `exposed` spans
    /// and the UD endpoint by `boot.allgather` and each RC QP's endpoint with the rank it is for by
    /// `boot.alltoall`,
    /// connects every RC QP, then agrees with every rank on the outcome by `boot.allgather`. On
    /// first use it creates no RC QP (but the loopback one) and no alltoall is made: the control
    /// QP (its CQ, its 16 KiB of registered memory) instead, whose endpoint goes with the spans. On
    /// `port`, in `pd`, with completions to `send_cq` and `recv_cq` (they may be the same CQ, and
    /// must hold the completions of all the group's QPs).
    /// @throws peer_group_error on every rank when any rank failed to create its QPs, was built
    ///         with options other than rank 0's, could not read a peer's header or spans (another
    ///         rdmacxx version, or corrupt), to connect or to make an address handle, or (on first
    ///         use) to make its control QP or whose `first_use_timeout` is not positive; argument_error (on this rank
    ///         only, before any exchange) when the bootstrap's rank or size is out of range; whatever the bootstrap
    ///         throws (the group cannot agree then).
    template <bootstrap Bootstrap>
    peer_group(Bootstrap& boot, end_port const& port, protection_domain& pd, completion_queue<Completion>& send_cq,
               completion_queue<Completion>& recv_cq, exposed_spans const& exposed = {},
               peer_group_options const& opt = {})
        : rank_(static_cast<int>(boot.rank())), size_(static_cast<int>(boot.size())), spans_(exposed.spans().size()) {
        if (size_ < 1 || rank_ < 0 || rank_ >= size_) [[unlikely]]
            detail::throw_argument("peer_group: the bootstrap says rank " + std::to_string(rank_) + " of " +
                                   std::to_string(size_));
        auto const n = static_cast<std::size_t>(size_);
        auto const me = static_cast<std::size_t>(rank_);
        bool const first_use = opt.connect_on_first_use;
        std::uint32_t const flags = (opt.with_ud ? 1U : 0U) | (first_use ? 2U : 0U);
        std::string failure; // what failed on this rank, empty while nothing has
        std::exception_ptr local;
        auto attempt = [&](std::string const& stage, auto&& step) {
            if (!failure.empty()) return;
            try {
                step();
            } catch (std::exception const& e) {
                failure = stage + ": " + e.what();
                local = std::current_exception();
            }
        };

        // This rank's header, its record (its spans and UD endpoint) for every rank, and its
        // endpoint for each rank (zeros for itself unless with loopback).
        std::size_t const header_bytes = detail::peer_group_header::bytes;
        std::size_t const record = record_bytes(spans_, opt.with_ud, first_use);
        std::size_t const ud_at = spans_ * span_bytes;
        std::size_t const control_at = ud_at + (opt.with_ud ? endpoint_bytes : 0);
        std::vector<std::byte> head(header_bytes), mine(record), blocks(first_use ? 0 : n * endpoint_bytes);
        attempt("creating its QPs", [&] {
            qps_.resize(n);
            for (std::size_t r = 0; r < n; ++r)
                if ((r != me && !first_use) || (r == me && opt.loopback))
                    qps_[r].emplace(pd, send_cq, recv_cq, opt.caps);
            if (first_use) {
                if (opt.first_use_timeout <= std::chrono::milliseconds{0})
                    detail::throw_argument("peer_group: first_use_timeout is " +
                                           std::to_string(opt.first_use_timeout.count()) + " ms; it must be positive");
                first_use_ = std::make_unique<detail::first_use<Completion>>(port, pd, send_cq, recv_cq, opt.caps,
                                                                             opt.settings, qos(opt.settings),
                                                                             opt.first_use_timeout, rank_, size_);
                put(mine.data() + control_at, first_use_->local_endpoint().to_bytes());
            }
            if (opt.with_ud) {
                ud_qp_.emplace(pd, send_cq, recv_cq, opt.caps);
                ud_qp_->activate(port, opt.settings);
                put(mine.data() + ud_at, ud_qp_->local_endpoint(port).to_bytes());
            }
            for (std::size_t i = 0; i < spans_; ++i)
                put(mine.data() + i * span_bytes, exposed.spans()[i].to_bytes());
            if (!first_use)
                for (std::size_t r = 0; r < n; ++r)
                    if (qps_[r]) put(blocks.data() + r * endpoint_bytes, qps_[r]->local_endpoint(port).to_bytes());
        });
        detail::peer_group_header const own{static_cast<std::uint32_t>(n), flags, !failure.empty(), spans_};
        own.write(head.data());

        // Every rank's header first (fixed size whatever the options): every rank sees the same
        // headers, so all decide alike whether to go on to the exchanges whose sizes depend on
        // the options. Rank 0's header is the reference; a rank built otherwise is the one failed.
        std::vector<std::byte> heads(header_bytes * n);
        boot.allgather(std::span<std::byte const>{head}, std::span<std::byte>{heads});
        bool go_on = true;
        for (std::size_t r = 0; r < n; ++r) {
            std::string why;
            std::optional<detail::peer_group_header> h;
            try {
                h = detail::peer_group_header::read(std::span<std::byte const>{heads}.subspan(r * header_bytes));
            } catch (error const& e) {
                why = e.what();
            }
            go_on = go_on && h && !h->failed && h->size == n && h->flags == flags && h->spans == spans_;
            if (r == 0 && h && !h->failed && (h->size != n || h->flags != flags || h->spans != spans_))
                attempt("comparing its options with rank 0's", [&] {
                    detail::throw_argument("this rank built its group for " + describe(n, flags, spans_) +
                                           ", rank 0 for " + describe(h->size, h->flags, h->spans));
                });
            if (!why.empty())
                attempt("reading rank " + std::to_string(r) + "'s header", [&] { throw argument_error(why); });
        }

        if (go_on) {
            std::vector<std::byte> all(record * n), theirs(blocks.size());
            boot.allgather(std::span<std::byte const>{mine}, std::span<std::byte>{all});
            if (!first_use) boot.alltoall(std::span<std::byte const>{blocks}, std::span<std::byte>{theirs});
            attempt("reading the peers' spans", [&] {
                remotes_.resize(n * spans_);
                for (std::size_t r = 0; r < n; ++r)
                    for (std::size_t i = 0; i < spans_; ++i)
                        remotes_[r * spans_ + i] = remote_span<std::byte>::from_bytes(
                            std::span<std::byte const>{all}.subspan(r * record + i * span_bytes));
                if (!first_use) return;
                std::vector<endpoint> controls(n);
                for (std::size_t r = 0; r < n; ++r)
                    controls[r] = endpoint::from_bytes(
                        std::span<std::byte const>{all}.subspan(r * record + control_at, endpoint_bytes));
                first_use_->set_peers(std::move(controls));
            });
            for (std::size_t r = 0; r < n; ++r) {
                if (qps_[r]) // with loopback, this rank's own QP gets its own endpoint back from the alltoall
                    attempt(r == me ? std::string{"connecting its QP to itself"}
                                    : "connecting to rank " + std::to_string(r),
                            [&] {
                                endpoint const remote =
                                    first_use ? qps_[r]->local_endpoint(port)
                                              : endpoint::from_bytes(std::span<std::byte const>{theirs}.subspan(
                                                    r * endpoint_bytes, endpoint_bytes));
                                qps_[r]->connect(port, remote, opt.settings);
                            });
                if (opt.with_ud && r != me)
                    attempt("making the address handle of rank " + std::to_string(r), [&] {
                        ud_remotes_.resize(n);
                        ahs_.resize(n);
                        auto const at = std::span<std::byte const>{all}.subspan(r * record + ud_at, endpoint_bytes);
                        endpoint const ud_remote = endpoint::from_bytes(at);
                        ud_remotes_[r] = ud_remote.qpn;
                        ahs_[r].emplace(pd, port, ud_remote.lid, ud_remote.gid, qos(opt.settings));
                    });
            }
        }
        agree(boot, failure, std::move(local));
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

    /// The RC QP connected to `peer`; for `peer == rank()`, with `peer_group_options::loopback`,
    /// the QP connected to itself.
    ///
    /// With `connect_on_first_use`, the first call for a peer makes the QP and runs the
    /// handshake with it (answering other ranks' handshakes meanwhile), within
    /// `first_use_timeout`; later calls cost one atomic load more than without.
    /// @throws argument_error when `peer` is not in [0, size()), or is this rank in a group made
    ///         without loopback; on first use, peer_connect_error when `peer` did not answer
    ///         within the timeout, refused, or could not be connected to; what making this
    ///         rank's QP throws (sys_error, argument_error); wc_error when the control QP failed.
    [[nodiscard]] rc_queue_pair& qp(int peer) {
        if (peer == rank_ && !has_loopback()) [[unlikely]]
            detail::throw_argument("peer_group::qp: rank " + std::to_string(peer) +
                                   " is this rank; a QP to itself needs peer_group_options::loopback");
        if (peer != rank_) {
            check_peer(peer, "qp");
            if (first_use_ && !first_use_->ready(peer)) [[unlikely]]
                first_use_->ensure(peer, qps_);
        }
        return *qps_[static_cast<std::size_t>(peer)];
    }
    /// True when the RC QP to `peer` exists and is connected on both sides (always, for every
    /// other rank, without `connect_on_first_use`; for this rank, with loopback).
    [[nodiscard]] bool connected(int peer) const noexcept {
        if (peer < 0 || peer >= size_) return false;
        if (peer == rank_) return has_loopback();
        return first_use_ ? first_use_->ready(peer) : true;
    }
    /// With `connect_on_first_use`: answers the handshakes of peers that asked for a QP to this
    /// rank, without waiting (a rank that waits for a peer's first message outside the group
    /// calls it in its loop). Without, it does nothing.
    /// It makes, connects or resets this rank's QP for each peer that asked. Handles at most 64
    /// messages a call.
    /// @return how many handshake messages were handled.
    /// @throws wc_error when the control QP failed (it is in ERR); sys_error when its receives
    ///         cannot be posted again.
    std::size_t progress() { return first_use_ ? first_use_->progress(qps_) : 0; }
    /// True when the group was built with `loopback`: `qp(rank())` exists.
    [[nodiscard]] bool has_loopback() const noexcept {
        return rank_ < static_cast<int>(qps_.size()) && qps_[static_cast<std::size_t>(rank_)].has_value();
    }
    /// The span `i` rank `r` exposed (this rank's own for `r == rank()`; empty where a rank
    /// exposed none).
    /// @throws argument_error when `r` is not in [0, size()) or `i` not in [0, spans_per_rank()).
    [[nodiscard]] remote_span<std::byte> remote(int r, std::size_t i = 0) const {
        if (r < 0 || r >= size_ || i >= spans_) [[unlikely]]
            detail::throw_argument("peer_group::remote: rank " + std::to_string(r) + " span " + std::to_string(i) +
                                   " is not in [0, " + std::to_string(size_) + ") × [0, " + std::to_string(spans_) +
                                   ")");
        return remotes_[static_cast<std::size_t>(r) * spans_ + i];
    }
    /// How many spans each rank exposed (at least 1).
    [[nodiscard]] std::size_t spans_per_rank() const noexcept { return spans_; }

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

    // The address settings of the group's UD address handles.
    static address_qos qos(qp_settings const& s) noexcept {
        return {.service_level = s.service_level.value_or(0),
                .hop_limit = s.hop_limit.value_or(64),
                .traffic_class = s.traffic_class.value_or(0),
                .flow_label = s.flow_label.value_or(0)};
    }
    static constexpr std::size_t record_bytes(std::size_t spans, bool with_ud, bool first_use) noexcept {
        return spans * span_bytes + (with_ud ? endpoint_bytes : 0) + (first_use ? endpoint_bytes : 0);
    }
    static std::string describe(std::size_t n, std::uint32_t flags, std::size_t spans) {
        return std::to_string(n) + " ranks, " + ((flags & 1U) != 0 ? "with" : "without") + " UD, " +
               ((flags & 2U) != 0 ? "connections on first use, " : "") + std::to_string(spans) + " exposed span" +
               (spans == 1 ? "" : "s");
    }

    // The status round: every rank says whether it failed; when any did, every rank sends its
    // reason (empty when it did not fail) and every rank throws the same peer_group_error.
    template <class Bootstrap>
    void agree(Bootstrap& boot, std::string const& failure, std::exception_ptr local) {
        auto const n = static_cast<std::size_t>(size_);
        using status = detail::peer_group_status;
        std::array<std::byte, status::bytes> mine{};
        status::write(mine.data(), !failure.empty());
        std::vector<std::byte> all(status::bytes * n);
        boot.allgather(std::span<std::byte const>{mine}, std::span<std::byte>{all});
        bool any = false;
        for (std::size_t r = 0; r < n; ++r)
            any = any || status::failed(std::span<std::byte const>{all}.subspan(r * status::bytes, status::bytes));
        if (!any) return;
        std::vector<std::byte> reason(status::reason_record), reasons(status::reason_record * n);
        status::write_reason(reason.data(), failure);
        boot.allgather(std::span<std::byte const>{reason}, std::span<std::byte>{reasons});
        std::vector<peer_group_error::failure> failures;
        for (std::size_t r = 0; r < n; ++r) {
            if (!status::failed(std::span<std::byte const>{all}.subspan(r * status::bytes, status::bytes))) continue;
            failures.push_back(
                {static_cast<int>(r), r == static_cast<std::size_t>(rank_)
                                          ? failure
                                          : status::read_reason(std::span<std::byte const>{reasons}.subspan(
                                                r * status::reason_record, status::reason_record))});
        }
        throw peer_group_error(rank_, std::move(failures), std::move(local));
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
    std::size_t spans_; // exposed by each rank
    std::vector<std::optional<rc_queue_pair>> qps_;
    std::vector<remote_span<std::byte>> remotes_;
    std::optional<ud_queue_pair> ud_qp_;
    std::vector<std::optional<address_handle>> ahs_;
    std::vector<std::uint32_t> ud_remotes_;
    std::uint32_t qkey_ = 0;
    std::unique_ptr<detail::first_use<Completion>> first_use_; // with connect_on_first_use
};

} // namespace v0
} // namespace rdmacxx
