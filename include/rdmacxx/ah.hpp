#pragma once
/// @file
/// `address_handle`: the route to a remote port, for UD sends.

#include "rdmacxx/detail/address_vector.hpp"
#include "rdmacxx/end_port.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/qp_settings.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace rdmacxx {
inline namespace v0 {

/// The QoS and GRH fields of an address handle: service level, hop limit, traffic class and
/// flow label (the last three go in the GRH, which RoCE always uses).
struct address_qos {
    /// SL, 0 … 15 (RoCE: the 802.1p priority where the device maps it).
    std::uint8_t service_level = 0;
    std::uint8_t hop_limit = 64; ///< GRH hop limit
    /// GRH traffic class (RoCE: the IP header's DSCP and ECN bits, DSCP = traffic_class >> 2).
    std::uint8_t traffic_class = 0;
    /// GRH flow label, 20 bits (0 … 0xFFFFF); 0: none chosen.
    std::uint32_t flow_label = 0;
};

/// An address handle (`ibv_ah`): the path from a local port to a remote one, named by a UD send
/// together with the remote QPN and Q_Key. Owns the handle; move-only; its protection domain
/// must outlive it.
/// Thread-safety: immutable once made; may be used by several QPs and threads.
/// @see ibv_create_ah(3)
class address_handle {
public:
    /// An address handle from raw attributes (as an RDMA CM UD event delivers them).
    /// @throws sys_error when ibv_create_ah(3) fails.
    address_handle(protection_domain& pd, ibv_ah_attr const& attr) {
        ibv_ah_attr copy = attr;
        handle_.reset(::ibv_create_ah(pd.native_handle(), &copy));
        if (!handle_) [[unlikely]]
            detail::throw_errno("ibv_create_ah");
    }

    /// The route from `port` to the remote port with LID `remote_lid` and GID `remote_gid`. A
    /// GRH is used whenever the remote GID is set or the port is RoCE (which needs one).
    /// @throws sys_error naming both ends when ibv_create_ah(3) fails (e.g. no route to the GID).
    address_handle(protection_domain& pd, end_port const& port, std::uint16_t remote_lid, gid const& remote_gid,
                   std::uint8_t service_level = 0, std::uint8_t hop_limit = 64)
        : address_handle(pd, port, remote_lid, remote_gid,
                         address_qos{.service_level = service_level, .hop_limit = hop_limit}) {}

    /// As above, with the SL, hop limit, traffic class and flow label of `qos` (RoCE QoS: the
    /// traffic class becomes the packets' DSCP/ECN byte).
    /// @throws argument_error when the flow label is over 20 bits or the SL over 15, before
    ///         ibv_create_ah(3) is called; sys_error naming both ends when ibv_create_ah(3) fails.
    address_handle(protection_domain& pd, end_port const& port, std::uint16_t remote_lid, gid const& remote_gid,
                   address_qos const& qos) {
        detail::check_qos(qos.flow_label, qos.service_level, "an address handle to GID " + remote_gid.to_string());
        ibv_ah_attr attr = detail::address_vector(detail::local_end_of(port), remote_lid, remote_gid.native(),
                                                  {.service_level = qos.service_level,
                                                   .hop_limit = qos.hop_limit,
                                                   .traffic_class = qos.traffic_class,
                                                   .flow_label = qos.flow_label});
        handle_.reset(::ibv_create_ah(pd.native_handle(), &attr));
        if (!handle_) [[unlikely]]
            detail::throw_errno("ibv_create_ah", [&] {
                return "from " + port.to_string() + " GID " + port.gid().gid.to_string() + " to LID " +
                       std::to_string(remote_lid) + " GID " + remote_gid.to_string();
            });
    }

    /// The verbs handle.
    [[nodiscard]] ibv_ah* native_handle() const noexcept { return handle_.get(); }

private:
    struct deleter {
        void operator()(ibv_ah* a) const noexcept { (void)::ibv_destroy_ah(a); }
    };
    std::unique_ptr<ibv_ah, deleter> handle_;
};

} // namespace v0
} // namespace rdmacxx
