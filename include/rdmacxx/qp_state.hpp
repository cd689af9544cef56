#pragma once
/// @file
/// `qp_state_machine`: a queue pair's state transitions (RESET → INIT → RTR → RTS, ERR, back to
/// RESET), the attribute masks they are made with and the names printed when one fails. Part of
/// `queue_pair` (qp.hpp), which users include.

#include "rdmacxx/detail/address_vector.hpp"
#include "rdmacxx/detail/verbs.hpp"
#include "rdmacxx/end_port.hpp"
#include "rdmacxx/endpoint.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"
#include "rdmacxx/qp_settings.hpp"
#include "rdmacxx/transport.hpp"

#include <cstdint>
#include <string>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

namespace detail {
/// "STATE|AV|PATH_MTU", the names of the bits set in an `ibv_qp_attr_mask`.
inline std::string qp_mask_names(int mask) {
    static constexpr std::pair<int, char const*> names[] = {
        {IBV_QP_STATE, "STATE"},
        {IBV_QP_CUR_STATE, "CUR_STATE"},
        {IBV_QP_EN_SQD_ASYNC_NOTIFY, "EN_SQD_ASYNC_NOTIFY"},
        {IBV_QP_ACCESS_FLAGS, "ACCESS_FLAGS"},
        {IBV_QP_PKEY_INDEX, "PKEY_INDEX"},
        {IBV_QP_PORT, "PORT"},
        {IBV_QP_QKEY, "QKEY"},
        {IBV_QP_AV, "AV"},
        {IBV_QP_PATH_MTU, "PATH_MTU"},
        {IBV_QP_TIMEOUT, "TIMEOUT"},
        {IBV_QP_RETRY_CNT, "RETRY_CNT"},
        {IBV_QP_RNR_RETRY, "RNR_RETRY"},
        {IBV_QP_RQ_PSN, "RQ_PSN"},
        {IBV_QP_MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC"},
        {IBV_QP_ALT_PATH, "ALT_PATH"},
        {IBV_QP_MIN_RNR_TIMER, "MIN_RNR_TIMER"},
        {IBV_QP_SQ_PSN, "SQ_PSN"},
        {IBV_QP_MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"},
        {IBV_QP_PATH_MIG_STATE, "PATH_MIG_STATE"},
        {IBV_QP_CAP, "CAP"},
        {IBV_QP_DEST_QPN, "DEST_QPN"},
        {IBV_QP_RATE_LIMIT, "RATE_LIMIT"},
    };
    std::string s;
    for (auto const& [bit, name] : names)
        if ((mask & bit) != 0) {
            if (!s.empty()) s += '|';
            s += name;
        }
    return s.empty() ? "0" : s;
}

/// "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR".
constexpr char const* qp_state_name(ibv_qp_state s) noexcept {
    switch (s) {
    case IBV_QPS_RESET:
        return "RESET";
    case IBV_QPS_INIT:
        return "INIT";
    case IBV_QPS_RTR:
        return "RTR";
    case IBV_QPS_RTS:
        return "RTS";
    case IBV_QPS_SQD:
        return "SQD";
    case IBV_QPS_SQE:
        return "SQE";
    case IBV_QPS_ERR:
        return "ERR";
    case IBV_QPS_UNKNOWN:
        break;
    }
    return "UNKNOWN";
}
} // namespace detail

/// The state transitions of `queue_pair<Transport, …>`, a base of it (CRTP: `QueuePair` is the
/// queue pair itself, whose handle, PSN and path MTU these members read and write). It adds no
/// data and no cost: `queue_pair` is the type to name; these members are called on it.
///
/// A QP starts in RESET; `connect` (RC, UC) or `activate` (UD) walks RESET → INIT → RTR → RTS,
/// and the single steps are public too. Thread-safety: as `queue_pair`, one thread at a time.
/// @see ibv_modify_qp(3), ibv_query_qp(3)
template <class QueuePair, transport Transport>
class qp_state_machine {
public:
    /// The current state, as the device reports it.
    /// @throws sys_error when ibv_query_qp(3) fails.
    [[nodiscard]] ibv_qp_state state() const {
        ibv_qp_attr attr{};
        ibv_qp_init_attr init{};
        if (int rc = ::ibv_query_qp(self().qp_.get(), &attr, IBV_QP_STATE, &init); rc != 0) [[unlikely]]
            detail::throw_sys(rc, "ibv_query_qp");
        return attr.qp_state;
    }

    /// What a peer needs to reach this QP through `port`; its `path_mtu` is the port's active MTU.
    [[nodiscard]] endpoint local_endpoint(end_port const& port) const noexcept {
        return {port.lid(), self().qp_num(), self().psn_, port.gid().gid, port.attributes().active_mtu()};
    }
    /// As above, advertising the path MTU `settings` asks for (when smaller than the port's
    /// active MTU).
    [[nodiscard]] endpoint local_endpoint(end_port const& port, qp_settings const& settings) const noexcept {
        endpoint e = local_endpoint(port);
        if (settings.path_mtu && mtu_bytes(*settings.path_mtu) < mtu_bytes(e.path_mtu)) e.path_mtu = *settings.path_mtu;
        return e;
    }

    /// RESET → INIT on `port`: P_Key index, and the access granted to the peer (RC, UC) or the
    /// Q_Key (UD), from `settings`.
    /// @throws argument_error when `settings` fails `detail::validate` (nothing is changed);
    ///         sys_error naming the transition and the attribute mask when ibv_modify_qp(3) or
    ///         ibv_query_device(3) fails.
    void to_init(end_port const& port, qp_settings const& settings = {}) {
        to_init(port, settings, checked_device(settings));
    }

    /// INIT → RTR towards `remote` (RC, UC): path MTU (the port's active MTU, no more than
    /// `remote.path_mtu` when set nor `settings.path_mtu`), remote QPN and PSN, address vector
    /// (a GRH from `port`'s GID whenever the remote GID is set, as RoCE needs; SL, hop limit,
    /// traffic class and flow label from `settings` or the verbs path's 0, 64, 0, 0), and on RC
    /// the responder resources and minimum RNR timer.
    /// @throws argument_error when `settings` fails `detail::validate` or its path MTU exceeds
    ///         the port's active MTU (nothing is changed then); sys_error naming the transition
    ///         and mask when ibv_modify_qp(3) fails.
    void to_rtr(end_port const& port, endpoint const& remote,
                qp_settings const& settings = {}) requires(Transport::connected) {
        to_rtr(port, remote, settings, checked_device(settings));
    }

    /// INIT → RTR for UD, which has no remote: records the port's active MTU as the largest
    /// message a send may carry.
    /// @throws sys_error naming the transition when ibv_modify_qp(3) fails.
    void to_rtr(end_port const& port) requires(!Transport::connected) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_RTR;
        modify(attr, Transport::rtr_mask, IBV_QPS_INIT);
        self().path_mtu_bytes_ = mtu_bytes(port.attributes().active_mtu());
    }

    /// RTR → RTS: this QP may send, starting at `psn()`; on RC with `settings`' local ACK
    /// timeout, retry count, RNR retry count and initiator depth.
    /// @throws argument_error when `settings` fails `detail::validate` (nothing is changed);
    ///         sys_error naming the transition and mask when ibv_modify_qp(3) fails.
    void to_rts(qp_settings const& settings = {}) { to_rts(settings, checked_device(settings)); }

    /// False when the device cannot run atomics (`atomic_cap` IBV_ATOMIC_NONE), as found when
    /// the QP was moved to RTS (true before, and for a QP adopted from the CM). A `checked` QP
    /// refuses compare-and-swap and fetch-and-add then, with argument_error before posting; an
    /// unchecked one leaves the refusal to the device (a failed completion), keeping its post
    /// path as short as verbs.
    [[nodiscard]] bool supports_atomics() const noexcept { return self().atomics_; }

    /// RESET → INIT → RTR → RTS towards `remote` through `port` (RC, UC), with `settings`
    /// checked once, before the first step.
    /// @throws as the three steps, with the step in the context messages.
    void connect(end_port const& port, endpoint const& remote,
                 qp_settings const& settings = {}) requires(Transport::connected) {
        ibv_device_attr const dev = checked_device(settings);
        check_path_mtu(port, settings);
        to_init(port, settings, dev);
        to_rtr(port, remote, settings, dev);
        to_rts(settings, dev);
    }

    /// RESET → INIT → RTR → RTS on `port` (UD): ready to send to any address handle and receive
    /// with `settings.qkey`.
    /// @throws as the three steps.
    void activate(end_port const& port, qp_settings const& settings = {}) requires(!Transport::connected) {
        ibv_device_attr const dev = checked_device(settings);
        to_init(port, settings, dev);
        to_rtr(port);
        to_rts(settings, dev);
    }

    /// Moves the QP to ERR: outstanding requests complete with IBV_WC_WR_FLUSH_ERR.
    /// @throws sys_error when ibv_modify_qp(3) fails.
    void to_error() {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        modify(attr, IBV_QP_STATE, IBV_QPS_UNKNOWN);
    }

    /// Moves the QP back to RESET; its queues are emptied without completions. A `checked` QP
    /// first moves to ERR and drains the completions of its work in flight, quietly.
    /// @throws sys_error when ibv_modify_qp(3) fails.
    void reset() {
        self().retire_in_flight(false);
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_RESET;
        modify(attr, IBV_QP_STATE, IBV_QPS_UNKNOWN);
        if constexpr (QueuePair::tracked)
            if (self().tracking_) self().tracking_->ledger().forget_all(); // emptied without completions
        self().path_mtu_bytes_ = 0;
    }

protected:
    /// Made only as the base of `queue_pair`.
    qp_state_machine() = default;

private:
    [[nodiscard]] QueuePair& self() noexcept { return static_cast<QueuePair&>(*this); }
    [[nodiscard]] QueuePair const& self() const noexcept { return static_cast<QueuePair const&>(*this); }

    // The device's limits, after `settings` passed the one validator against them.
    [[nodiscard]] ibv_device_attr checked_device(qp_settings const& settings) const {
        std::string const what = std::string{Transport::name} + " QP " + std::to_string(self().qp_num());
        ibv_device_attr const dev = detail::query_device(self().qp_->context, what);
        detail::validate(settings, Transport::qp_type, dev, what);
        return dev;
    }

    // A path MTU over the port's active MTU is refused before the first transition.
    static void check_path_mtu(end_port const& port, qp_settings const& settings) {
        ibv_mtu const active = port.attributes().active_mtu();
        if (settings.path_mtu && mtu_bytes(*settings.path_mtu) > mtu_bytes(active)) [[unlikely]]
            detail::throw_argument("path MTU " + std::to_string(mtu_bytes(*settings.path_mtu)) +
                                   " exceeds the active MTU " + std::to_string(mtu_bytes(active)) + " of port " +
                                   port.to_string() + "; nothing was changed");
    }

    void to_init(end_port const& port, qp_settings const& settings, ibv_device_attr const& dev) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = port.port_num();
        int mask = Transport::init_mask;
        detail::apply(settings, Transport::qp_type, dev, attr, mask);
        modify(attr, mask, IBV_QPS_RESET);
    }

    void to_rtr(end_port const& port, endpoint const& remote, qp_settings const& settings,
                ibv_device_attr const& dev) requires(Transport::connected) {
        check_path_mtu(port, settings);
        ibv_mtu const active = port.attributes().active_mtu();
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_RTR;
        attr.path_mtu = mtu_bytes(remote.path_mtu) != 0 && mtu_bytes(remote.path_mtu) < mtu_bytes(active)
                            ? remote.path_mtu
                            : active;
        attr.dest_qp_num = remote.qpn;
        attr.rq_psn = remote.psn;
        attr.max_dest_rd_atomic = 255; // no more than the device's, unless asked (detail::apply)
        attr.ah_attr = detail::address_vector(detail::local_end_of(port), remote.lid, remote.gid.native(), {});
        int mask = Transport::rtr_mask;
        detail::apply(settings, Transport::qp_type, dev, attr, mask);
        try {
            modify(attr, mask, IBV_QPS_INIT);
        } catch (error& e) { // a route error names the GID chosen on this side and the remote one
            e.push_context("Failed routing QP " + std::to_string(self().qp_num()) + " from " + port.describe() +
                           " to GID " + remote.gid.to_string());
            throw;
        }
        self().path_mtu_bytes_ = mtu_bytes(attr.path_mtu);
    }

    void to_rts(qp_settings const& settings, ibv_device_attr const& dev) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_RTS;
        attr.sq_psn = self().psn_;
        attr.max_rd_atomic = 255; // no more than the device's, unless asked (detail::apply)
        int mask = Transport::rts_mask;
        detail::apply(settings, Transport::qp_type, dev, attr, mask);
        modify(attr, mask, IBV_QPS_RTR);
        if constexpr (Transport::qp_type == IBV_QPT_RC) self().atomics_ = dev.atomic_cap != IBV_ATOMIC_NONE;
    }

    void modify(ibv_qp_attr& attr, int mask, ibv_qp_state from) {
        if (int rc = ::ibv_modify_qp(self().qp_.get(), &attr, mask); rc != 0) [[unlikely]]
            detail::throw_sys(
                rc, "ibv_modify_qp",
                std::string{"moving "} + Transport::name + " QP " + std::to_string(self().qp_num()) +
                    (from == IBV_QPS_UNKNOWN ? std::string{} : std::string{" from "} + detail::qp_state_name(from)) +
                    " to " + detail::qp_state_name(attr.qp_state) + " with attribute mask " +
                    detail::qp_mask_names(mask));
    }
};

} // namespace v0
} // namespace rdmacxx
