#pragma once
/// @file
/// `cm::multicast_group`: a multicast group joined through the RDMA CM with a UD queue pair
/// attached, on its own PD and CQ or on `cm::resources` you own.

#include "rdmacxx/cm/connection.hpp"
#include "rdmacxx/ownership.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// A multicast group joined through the CM, with a UD queue pair attached to it: what `mckey`
/// does. Owns its event channel, id, QP and the group's address handle, and either owns a PD and
/// CQ or borrows them (`cm::shared_qp<ud>(resources)`); leaves the group on destruction. Send with
/// `qp().post(send{…}.to(ah(), qpn(), qkey()))`; receive (with the 40-byte GRH in front) on the same QP. Thread-safety:
/// one thread at a time.
/// @see rdma_join_multicast(3), rdma_leave_multicast(3), mckey(1)
template <completion_strategy Completion>
class multicast_group final {
public:
    /// Resolves `group` from `local` (the address of the RDMA device to use) within the
    /// options' resolve-address deadline, takes the UD QP from `source` — its own PD and CQ
    /// (`{}`, `opt.cq_entries` entries), or `cm::shared_qp<ud>(r)`: made in `r.pd` on `r.send_cq`
    /// and `r.recv_cq` (and `r.srq`), which the group only borrows (they must be on the device of
    /// `local` and outlive the group; they may move meanwhile: the group follows them through
    /// their cells, see docs/ownership.md) — joins and waits up to `opt.deadlines.event` for
    /// `multicast_join`. The same settings and QP source as `cm::connect`.
    /// @throws address_error, route_not_found_error when resolving fails; multicast_error when the
    ///         join fails; timeout_error naming the step; argument_error when a borrowed PD or CQ
    ///         is on another device, or `source` names a queue pair; sys_error when a call fails.
    ///         Exception-safe: whatever throws after the join, the group is left (which detaches
    ///         the QP) and the QP, CQ and PD are released in reverse order before the exception
    ///         leaves.
    multicast_group(address const& local, address const& group, connection_options const& opt = {},
                    qp_source<ud, Completion> const& source = {})
        : group_(group), id_(channel_, port_space::udp) {
        if (source.user.erased() != nullptr) [[unlikely]] // not made by user_qp (UD): assembled by hand
            rdmacxx::detail::throw_argument("multicast_group makes its UD QP: its source is {} or cm::shared_qp");
        setup(local, opt, source.shared ? &*source.shared : nullptr);
    }

    multicast_group(multicast_group const&) = delete;
    multicast_group& operator=(multicast_group const&) = delete;
    /// Takes over `other`'s membership, id, channel, QP and what it owns or borrows (its id lives
    /// on its channel, its QP on its id and PD and CQ: all on the heap or followed through their
    /// cells, so they stay valid); `other` is left empty and its destructor does nothing.
    multicast_group(multicast_group&& other) noexcept
        : group_(other.group_), channel_(std::move(other.channel_)), id_(std::move(other.id_)),
          own_pd_(std::move(other.own_pd_)), own_channel_(std::move(other.own_channel_)),
          own_cq_(std::move(other.own_cq_)), pd_(other.pd_), send_cq_(other.send_cq_), recv_cq_(other.recv_cq_),
          comp_channel_(other.comp_channel_), qp_(std::move(other.qp_)), ah_(std::move(other.ah_)), ud_(other.ud_),
          joined_(std::exchange(other.joined_, false)) {
        other.qp_.reset();
    }
    /// Leaves the group held and releases what it owns as the destructor does (the members
    /// depend on each other; `release` takes them apart in order), then takes over `other`'s;
    /// self-move is a no-op.
    multicast_group& operator=(multicast_group&& other) noexcept {
        if (this != &other) {
            std::destroy_at(this); // final, never a subobject: transparently replaced
            std::construct_at(this, std::move(other));
        }
        return *this;
    }

    ~multicast_group() { release(); }

    /// Leaves the group now (the QP stops receiving from it).
    /// @throws sys_error when rdma_leave_multicast(3) fails.
    void leave() {
        if (!joined_) return;
        joined_ = false;
        id_.leave_multicast(group_);
    }

    /// The UD queue pair attached to the group.
    [[nodiscard]] queue_pair<ud, Completion>& qp() noexcept { return *qp_; }
    /// Its CQ of sends, which is also that of receives when the group made its own, wherever it
    /// has moved to.
    /// @throws orphaned_error when a borrowed CQ was destroyed.
    [[nodiscard]] completion_queue<Completion>& cq() { return send_cq_.get("multicast group", "CQ"); }
    /// Its CQ of receives, wherever it has moved to.
    /// @throws orphaned_error when a borrowed CQ was destroyed.
    [[nodiscard]] completion_queue<Completion>& recv_cq() { return recv_cq_.get("multicast group", "CQ"); }
    /// The PD: register the memory you post here.
    /// @throws orphaned_error when a borrowed PD was destroyed.
    [[nodiscard]] protection_domain& pd() { return pd_.get("multicast group", "protection domain"); }
    /// The completion channel of its CQs (its own, or the one given in `cm::resources`); null
    /// for `busy_poll` or when none was given.
    /// @throws orphaned_error when the channel given was destroyed.
    [[nodiscard]] completion_channel* cq_channel() const {
        return comp_channel_.get_optional("multicast group", "completion channel");
    }
    /// The group's address handle.
    [[nodiscard]] address_handle const& ah() const noexcept { return *ah_; }
    /// The group's QPN (0xffffff).
    [[nodiscard]] std::uint32_t qpn() const noexcept { return ud_.qp_num; }
    /// The group's Q_Key.
    [[nodiscard]] std::uint32_t qkey() const noexcept { return ud_.qkey; }

private:
    void setup(address const& local, connection_options const& opt, resources<Completion> const* r) {
        try {
            auto const timeout = opt.deadlines.of(step::resolve_address);
            id_.resolve_address(group_, timeout, &local);
            (void)detail::expect(channel_, event_type::addr_resolved,
                                 rdmacxx::detail::saturating_add(timeout, std::chrono::milliseconds{1000}),
                                 "resolving multicast group " + group_.to_string(), step::resolve_address);
            if (r != nullptr) {
                detail::check_resources(*r, id_.native_handle()->verbs, "joining " + group_.to_string());
                pd_ = r->pd.anchor_cell();
                send_cq_ = r->send_cq.anchor_cell();
                recv_cq_ = r->recv_cq.anchor_cell();
                if (r->channel != nullptr) comp_channel_ = r->channel->anchor_cell();
            } else {
                own_pd_ = std::make_unique<protection_domain>(id_.context());
                if constexpr (Completion::uses_channel) {
                    own_channel_ = std::make_unique<completion_channel>(id_.context());
                    own_cq_ =
                        std::make_unique<completion_queue<Completion>>(id_.context(), opt.cq_entries, *own_channel_);
                } else {
                    own_cq_ = std::make_unique<completion_queue<Completion>>(id_.context(), opt.cq_entries);
                }
                pd_ = own_pd_->anchor_cell();
                send_cq_ = recv_cq_ = own_cq_->anchor_cell();
                if (own_channel_) comp_channel_ = own_channel_->anchor_cell();
            }
            qp_.emplace(id_.template create_qp<ud, Completion>(pd(), cq(), recv_cq(), r != nullptr ? r->srq : nullptr,
                                                               opt.caps));
            id_.join_multicast(group_);
            joined_ = true;
            event e = detail::expect(channel_, event_type::multicast_join, opt.deadlines.event,
                                     "joining multicast group " + group_.to_string(), step::join);
            ud_ = e.ud();
            ah_ = std::make_unique<address_handle>(pd(), ud_.ah_attr);
        } catch (...) {
            release();
            throw;
        }
    }

    // Leaves the group (librdmacm detaches the QP from it; an attached QP cannot be destroyed),
    // then releases the AH, QP, CQ and PD, newest first.
    void release() noexcept {
        ah_.reset();
        if (joined_) (void)::rdma_leave_multicast(id_.native_handle(), group_.native());
        joined_ = false;
        if (qp_) {
            id_.destroy_qp(*qp_);
            qp_.reset();
        }
        own_cq_.reset();
        own_channel_.reset();
        own_pd_.reset();
    }

    address group_;
    event_channel channel_;
    cm::id id_;
    std::unique_ptr<protection_domain> own_pd_;
    std::unique_ptr<completion_channel> own_channel_;
    std::unique_ptr<completion_queue<Completion>> own_cq_;
    // What the group uses, owned or borrowed, through their cells (see docs/ownership.md).
    rdmacxx::detail::link<protection_domain> pd_;
    rdmacxx::detail::link<completion_queue<Completion>> send_cq_;
    rdmacxx::detail::link<completion_queue<Completion>> recv_cq_;
    rdmacxx::detail::link<completion_channel> comp_channel_; // empty: none
    std::optional<queue_pair<ud, Completion>> qp_;
    std::unique_ptr<address_handle> ah_;
    ud_data ud_{};
    bool joined_ = false;
};

} // namespace cm
} // namespace v0
} // namespace rdmacxx
