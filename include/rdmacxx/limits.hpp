#pragma once
/// @file
/// `device_limits`: a device's limits and capabilities from ibv_query_device_ex(3), typed.

#include "rdmacxx/detail/verbs.hpp"

#include <cstdint>

namespace rdmacxx {
inline namespace v0 {

/// How atomic operations (`compare_swap`, `fetch_add`) are atomic on a device
/// (`ibv_device_attr::atomic_cap`).
enum class atomic_capability : std::uint32_t {
    none = IBV_ATOMIC_NONE,   ///< no atomic operations
    hca = IBV_ATOMIC_HCA,     ///< atomic among the QPs of this device only, not against the CPU
    global = IBV_ATOMIC_GLOB, ///< atomic against every agent, the CPU included
};

/// "none", "HCA" or "global".
[[nodiscard]] constexpr char const* to_string(atomic_capability a) noexcept {
    switch (a) {
    case atomic_capability::none:
        return "none";
    case atomic_capability::hca:
        return "HCA";
    case atomic_capability::global:
        return "global";
    }
    return "unknown";
}

/// A device's limits and capabilities, as ibv_query_device_ex(3) reports them, typed; from
/// `context::limits()`. Counts are per device unless named per QP, per WR or per SRQ.
///
/// The largest inline payload is not among them: verbs report it per QP, after creation, in the
/// `max_inline_data` the provider grants (`queue_pair::capabilities().max_inline_data`); a QP
/// asking for more than the device allows fails to be created (rxe: EINVAL).
/// A value type; `native()` gives every field. Thread-safety: immutable.
/// @see ibv_query_device_ex(3), ibv_query_device(3)
class device_limits {
public:
    /// Wraps attributes filled by ibv_query_device_ex(3).
    explicit device_limits(ibv_device_attr_ex const& attr) noexcept : attr_(attr) {}

    /// How atomics are atomic (none, among this device's QPs, or globally).
    [[nodiscard]] atomic_capability atomics() const noexcept {
        return static_cast<atomic_capability>(attr_.orig_attr.atomic_cap);
    }
    /// Outstanding RDMA READs and atomics a QP may serve as **responder** (`max_qp_rd_atom`):
    /// the ceiling of `qp_settings::responder_resources`.
    [[nodiscard]] int max_responder_resources() const noexcept { return attr_.orig_attr.max_qp_rd_atom; }
    /// Outstanding RDMA READs and atomics a QP may issue as **initiator** (`max_qp_init_rd_atom`):
    /// the ceiling of `qp_settings::initiator_depth`.
    [[nodiscard]] int max_initiator_depth() const noexcept { return attr_.orig_attr.max_qp_init_rd_atom; }
    /// Scatter-gather entries per send or receive WR (`max_sge`).
    [[nodiscard]] int max_sge() const noexcept { return attr_.orig_attr.max_sge; }
    /// Scatter-gather entries per RDMA read WR (`max_sge_rd`).
    [[nodiscard]] int max_sge_rd() const noexcept { return attr_.orig_attr.max_sge_rd; }
    /// Entries per CQ (`max_cqe`).
    [[nodiscard]] int max_cqe() const noexcept { return attr_.orig_attr.max_cqe; }
    /// CQs (`max_cq`).
    [[nodiscard]] int max_cq() const noexcept { return attr_.orig_attr.max_cq; }
    /// QPs (`max_qp`).
    [[nodiscard]] int max_qp() const noexcept { return attr_.orig_attr.max_qp; }
    /// WRs outstanding per queue of a QP (`max_qp_wr`).
    [[nodiscard]] int max_qp_wr() const noexcept { return attr_.orig_attr.max_qp_wr; }
    /// SRQs (`max_srq`); 0 when the device has none.
    [[nodiscard]] int max_srq() const noexcept { return attr_.orig_attr.max_srq; }
    /// WRs outstanding per SRQ (`max_srq_wr`).
    [[nodiscard]] int max_srq_wr() const noexcept { return attr_.orig_attr.max_srq_wr; }
    /// Memory regions (`max_mr`).
    [[nodiscard]] int max_mr() const noexcept { return attr_.orig_attr.max_mr; }
    /// Bytes one memory region may span (`max_mr_size`).
    [[nodiscard]] std::uint64_t max_mr_size() const noexcept { return attr_.orig_attr.max_mr_size; }
    /// Memory windows (`max_mw`); 0 when the device has none.
    [[nodiscard]] int max_mw() const noexcept { return attr_.orig_attr.max_mw; }
    /// Address handles (`max_ah`).
    [[nodiscard]] int max_ah() const noexcept { return attr_.orig_attr.max_ah; }
    /// Protection domains (`max_pd`).
    [[nodiscard]] int max_pd() const noexcept { return attr_.orig_attr.max_pd; }

    /// The raw on-demand paging bitmask (`odp_caps.general_caps`, `IBV_ODP_SUPPORT` …); 0 when
    /// the device has no ODP.
    [[nodiscard]] std::uint64_t odp_general_caps() const noexcept { return attr_.odp_caps.general_caps; }
    /// The raw ODP operations bitmask for RC QPs (`odp_caps.per_transport_caps.rc_odp_caps`,
    /// `IBV_ODP_SUPPORT_SEND` …).
    [[nodiscard]] std::uint32_t odp_rc_caps() const noexcept { return attr_.odp_caps.per_transport_caps.rc_odp_caps; }
    /// True when the device supports on-demand paging at all (`IBV_ODP_SUPPORT`).
    [[nodiscard]] bool on_demand_paging() const noexcept { return (odp_general_caps() & IBV_ODP_SUPPORT) != 0; }
    /// The bits of a completion timestamp the device fills (`completion_timestamp_mask`); 0 when
    /// completions carry no timestamp.
    [[nodiscard]] std::uint64_t completion_timestamp_mask() const noexcept { return attr_.completion_timestamp_mask; }
    /// The device clock in kHz that completion timestamps count (`hca_core_clock`); 0 when unknown.
    [[nodiscard]] std::uint64_t core_clock_khz() const noexcept { return attr_.hca_core_clock; }

    /// The raw capability flags (`device_cap_flags_ex`: `IBV_DEVICE_*`, a superset of
    /// `device_cap_flags`).
    [[nodiscard]] std::uint64_t cap_flags() const noexcept { return attr_.device_cap_flags_ex; }
    /// Memory windows (`IBV_DEVICE_MEM_WINDOW`).
    [[nodiscard]] bool memory_windows() const noexcept { return has(IBV_DEVICE_MEM_WINDOW); }
    /// Type 2A memory windows (`IBV_DEVICE_MEM_WINDOW_TYPE_2A`).
    [[nodiscard]] bool memory_window_type_2a() const noexcept { return has(IBV_DEVICE_MEM_WINDOW_TYPE_2A); }
    /// Type 2B memory windows (`IBV_DEVICE_MEM_WINDOW_TYPE_2B`).
    [[nodiscard]] bool memory_window_type_2b() const noexcept { return has(IBV_DEVICE_MEM_WINDOW_TYPE_2B); }
    /// Memory management extensions: local invalidate, send with invalidate, fast registration
    /// (`IBV_DEVICE_MEM_MGT_EXTENSIONS`).
    [[nodiscard]] bool memory_management_extensions() const noexcept { return has(IBV_DEVICE_MEM_MGT_EXTENSIONS); }
    /// Resizing a QP's queues (`IBV_DEVICE_RESIZE_MAX_WR`).
    [[nodiscard]] bool resize_max_wr() const noexcept { return has(IBV_DEVICE_RESIZE_MAX_WR); }
    /// Resizing an SRQ (`IBV_DEVICE_SRQ_RESIZE`).
    [[nodiscard]] bool srq_resize() const noexcept { return has(IBV_DEVICE_SRQ_RESIZE); }
    /// Requests for more than one completion event at a time (`IBV_DEVICE_N_NOTIFY_CQ`).
    [[nodiscard]] bool n_notify_cq() const noexcept { return has(IBV_DEVICE_N_NOTIFY_CQ); }
    /// RNR NAKs generated by an RC receiver with no receive posted (`IBV_DEVICE_RC_RNR_NAK_GEN`).
    [[nodiscard]] bool rc_rnr_nak_gen() const noexcept { return has(IBV_DEVICE_RC_RNR_NAK_GEN); }
    /// IP checksum offload on UD (`IBV_DEVICE_UD_IP_CSUM`).
    [[nodiscard]] bool ud_ip_csum() const noexcept { return has(IBV_DEVICE_UD_IP_CSUM); }
    /// The port can change its active port (`IBV_DEVICE_CHANGE_PHY_PORT`).
    [[nodiscard]] bool change_phy_port() const noexcept { return has(IBV_DEVICE_CHANGE_PHY_PORT); }

    /// Every field.
    [[nodiscard]] ibv_device_attr_ex const& native() const noexcept { return attr_; }

private:
    [[nodiscard]] bool has(std::uint64_t flag) const noexcept { return (attr_.device_cap_flags_ex & flag) != 0; }
    ibv_device_attr_ex attr_;
};

} // namespace v0
} // namespace rdmacxx
