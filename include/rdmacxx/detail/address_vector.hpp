#pragma once
/// @file
/// Internals: the address vector (`ibv_ah_attr`) from a local port to a remote one, shared by a
/// connected QP's RTR transition (qp_state.hpp) and an address handle (ah.hpp).

#include "rdmacxx/end_port.hpp"
#include "rdmacxx/gid.hpp"

#include <infiniband/verbs.h>

#include <cstdint>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

/// The QoS and GRH fields an address vector carries besides its two ends.
struct address_fields {
    std::uint8_t service_level = 0;
    std::uint8_t hop_limit = 64;
    std::uint8_t traffic_class = 0;
    std::uint32_t flow_label = 0;
};

/// The address vector from `port` to the remote port with LID `remote_lid` and GID
/// `remote_gid`. A GRH is used whenever the remote GID is set or the port is RoCE (which needs
/// one). The caller has checked the SL and flow label (check_qos).
[[nodiscard]] inline ibv_ah_attr address_vector(end_port const& port, std::uint16_t remote_lid, gid const& remote_gid,
                                                address_fields const& f) noexcept {
    ibv_ah_attr ah{};
    ah.dlid = remote_lid;
    ah.sl = f.service_level;
    ah.port_num = port.port_num();
    if (!remote_gid.is_zero() || port.attributes().is_ethernet()) {
        ah.is_global = 1;
        ah.grh.dgid = remote_gid.native();
        ah.grh.sgid_index = static_cast<std::uint8_t>(port.gid().index);
        ah.grh.hop_limit = f.hop_limit;
        ah.grh.traffic_class = f.traffic_class;
        ah.grh.flow_label = f.flow_label;
    }
    return ah;
}

} // namespace detail
} // namespace v0
} // namespace rdmacxx
