#pragma once
/// @file
/// `shared_receive_queue`: one pool of receive buffers for several QPs.

#include "rdmacxx/error.hpp"
#include "rdmacxx/ownership.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/wr.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

/// A shared receive queue (`ibv_srq`): receive requests posted here serve every QP created on it
/// (RC, UC and UD alike). With a limit armed, the device raises the async event
/// IBV_EVENT_SRQ_LIMIT_REACHED once fewer than `limit` requests are left. Owns the handle;
/// move-only; destroy it after the QPs that use it (the device refuses to free it before). It
/// may move after they were made: what refers to it (`cm::connection::srq()`) follows it (see
/// docs/ownership.md).
/// Thread-safety: posting needs the caller's lock, as for a QP.
/// @see ibv_create_srq(3), ibv_modify_srq(3), ibv_post_srq_recv(3)
class shared_receive_queue {
public:
    /// Creates an SRQ of at least `max_wr` requests of `max_sge` entries each in `pd`.
    /// @throws sys_error when ibv_create_srq(3) fails (EINVAL past the device's max_srq_wr).
    shared_receive_queue(protection_domain& pd, std::uint32_t max_wr, std::uint32_t max_sge = 1) : anchor_(this) {
        ibv_srq_init_attr init{};
        init.attr.max_wr = max_wr;
        init.attr.max_sge = max_sge;
        srq_.reset(::ibv_create_srq(pd.native_handle(), &init));
        if (!srq_) [[unlikely]]
            detail::throw_errno("ibv_create_srq", [&] {
                return "with max_wr " + std::to_string(max_wr) + ", max_sge " + std::to_string(max_sge);
            });
        max_wr_ = init.attr.max_wr;
    }
    /// Takes over `other`'s SRQ (what refers to it follows it here); `other` is left empty.
    shared_receive_queue(shared_receive_queue&& other) noexcept
        : anchor_(std::move(other.anchor_), this), srq_(std::move(other.srq_)),
          max_wr_(std::exchange(other.max_wr_, 0U)), watch_(std::move(other.watch_)) {}
    /// Destroys the SRQ held, as the destructor does, then takes over `other`'s; self-move is a no-op.
    shared_receive_queue& operator=(shared_receive_queue&& other) noexcept {
        if (this != &other) {
            destroy();
            srq_ = std::move(other.srq_);
            max_wr_ = std::exchange(other.max_wr_, 0U);
            watch_ = std::move(other.watch_);
            anchor_.take(std::move(other.anchor_), this);
        }
        return *this;
    }
    shared_receive_queue(shared_receive_queue const&) = delete;
    shared_receive_queue& operator=(shared_receive_queue const&) = delete;
    /// Destroys the SRQ (ibv_destroy_srq(3)). The Asio dispatcher that routed receives posted to
    /// it is told once it is gone (their handlers then run: rdmacxx/asio/dispatcher.hpp); when
    /// the device refuses (EBUSY: a QP still uses it) the SRQ is kept and nobody is told.
    ~shared_receive_queue() { destroy(); }

    /// Arms the limit: an async event fires once fewer than `limit` receive requests remain.
    /// The limit disarms itself when it fires; arm it again to hear of the next time.
    /// @throws sys_error when ibv_modify_srq(3) fails (EINVAL for a limit above max_wr).
    void arm_limit(std::uint32_t limit) {
        ibv_srq_attr attr{};
        attr.srq_limit = limit;
        if (int rc = ::ibv_modify_srq(srq_.get(), &attr, IBV_SRQ_LIMIT); rc != 0) [[unlikely]]
            detail::throw_sys(rc, "ibv_modify_srq", "arming the SRQ limit at " + std::to_string(limit));
    }

    /// The armed limit (0 when none is armed).
    /// @throws sys_error when ibv_query_srq(3) fails.
    [[nodiscard]] std::uint32_t limit() const {
        ibv_srq_attr attr{};
        if (int rc = ::ibv_query_srq(srq_.get(), &attr); rc != 0) [[unlikely]]
            detail::throw_sys(rc, "ibv_query_srq");
        return attr.srq_limit;
    }

    /// The number of receive requests the SRQ holds at most.
    [[nodiscard]] std::uint32_t max_wr() const noexcept { return max_wr_; }

    /// Posts receive requests `wrs` as one chain.
    /// @throws wr_error with `bad_index()` when ibv_post_srq_recv(3) refuses one.
    template <recv_work_request... Wrs>
        requires(sizeof...(Wrs) > 0)
    void post_recv(Wrs const&... wrs) {
        std::array<ibv_recv_wr, sizeof...(Wrs)> chain; // build and next set every field: no zeroing
        std::size_t i = 0;
        ((wrs.build(chain[i]), chain[i].next = i + 1 < chain.size() ? &chain[i + 1] : nullptr, ++i), ...);
        ibv_recv_wr* bad = nullptr;
        if (int rc = ::ibv_post_srq_recv(srq_.get(), chain.data(), &bad); rc != 0) [[unlikely]] {
            std::size_t k = 0;
            while (k < chain.size() && &chain[k] != bad)
                ++k;
            if (k == chain.size()) k = 0;
            throw wr_error(rc, "ibv_post_srq_recv", k, chain[k].wr_id, -1, 0);
        }
    }

    /// The verbs handle.
    [[nodiscard]] ibv_srq* native_handle() const noexcept { return srq_.get(); }

    /// @cond
    // The stable cell through which the objects that use this SRQ find it.
    [[nodiscard]] detail::link<shared_receive_queue> anchor_cell() const noexcept { return anchor_.cell(); }
    // Who is told once the SRQ is destroyed (the Asio dispatcher that routes its receives).
    [[nodiscard]] detail::destruction_watch& destruction_watch() noexcept { return watch_; }
    /// @endcond

private:
    // Destroys the SRQ held and tells the watcher; a refused destroy (EBUSY) keeps it, untold.
    void destroy() noexcept {
        ibv_srq* const held = srq_.release();
        if (held == nullptr) return;
        if (::ibv_destroy_srq(held) == 0) watch_.fire(held); // once it is gone: its receives with it
    }
    struct deleter {
        void operator()(ibv_srq* s) const noexcept { (void)::ibv_destroy_srq(s); }
    };
    detail::anchor<shared_receive_queue> anchor_; // before srq_: made first, so nothing leaks when it throws
    std::unique_ptr<ibv_srq, deleter> srq_;
    std::uint32_t max_wr_ = 0;
    detail::destruction_watch watch_; // told once the SRQ is gone
};

} // namespace v0
} // namespace rdmacxx
