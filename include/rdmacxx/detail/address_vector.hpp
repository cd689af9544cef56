#pragma once
/// @file
/// Internals: the address vector (`ibv_ah_attr`) from a local port to a remote one, shared by a
/// connected QP's RTR transition (qp_state.hpp) and an address handle (ah.hpp).

#include "rdmacxx/detail/verbs.hpp"

#include <cstdint>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

/// The local end of an address vector, as an `end_port` gives it: the port, the index of the
/// source GID in its table, and whether the port is Ethernet (RoCE, whose packets all carry a
/// GRH). Plain values, so that this layer needs nothing above it.
struct local_end {
    std::uint8_t port_num = 1;
    std::uint8_t sgid_index = 0;
    bool is_ethernet = false;
};

/// The QoS and GRH fields an address vector carries besides its two ends.
struct address_fields {
    std::uint8_t service_level = 0;
    std::uint8_t hop_limit = 64;
    std::uint8_t traffic_class = 0;
    std::uint32_t flow_label = 0;
};

/// The address vector from `local` to the remote port with LID `remote_lid` and GID
/// `remote_gid` (`gid::native()`). A GRH is used whenever the remote GID is set or the port is
/// RoCE (which needs one). The caller has checked the SL and flow label (check_qos).
[[nodiscard]] inline ibv_ah_attr address_vector(local_end const& local, std::uint16_t remote_lid,
                                                ibv_gid const& remote_gid, address_fields const& f) noexcept {
    ibv_ah_attr ah{};
    ah.dlid = remote_lid;
    ah.sl = f.service_level;
    ah.port_num = local.port_num;
    bool remote_set = false;
    for (std::uint8_t const b : remote_gid.raw)
        remote_set = remote_set || b != 0;
    if (remote_set || local.is_ethernet) {
        ah.is_global = 1;
        ah.grh.dgid = remote_gid;
        ah.grh.sgid_index = local.sgid_index;
        ah.grh.hop_limit = f.hop_limit;
        ah.grh.traffic_class = f.traffic_class;
        ah.grh.flow_label = f.flow_label;
    }
    return ah;
}

} // namespace detail
} // namespace v0
} // namespace rdmacxx
