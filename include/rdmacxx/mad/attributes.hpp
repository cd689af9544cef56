#pragma once
/// @file
/// Typed MAD headers and attributes with their wire layout, field for field as the InfiniBand
/// Architecture Specification vol. 1 lays them out (bit offsets from the first byte's most
/// significant bit): the common MAD header, the RMPP header, the SA header, ClassPortInfo,
/// PathRecord and PortCounters. Each is a plain value; `mad::encode`, `mad::decode` and
/// `mad::print` (rdmacxx/mad/fields.hpp) read and write it. Member names are the
/// specification's field names in snake case.

#include "rdmacxx/gid.hpp"
#include "rdmacxx/mad/fields.hpp"
#include "rdmacxx/mad/types.hpp"

#include <cstddef>
#include <cstdint>

namespace rdmacxx {
inline namespace v0 {
namespace mad {

/// The common MAD header: the first 24 bytes of every MAD (IBTA 13.4.2, table 97). `method`
/// holds the whole byte, the R (response) bit 7 included: a GetResp is 0x81.
struct mad_header {
    static constexpr char const* name = "MADHeader"; ///< its name in dumps
    static constexpr std::size_t size = 24;          ///< bytes on the wire

    std::uint8_t base_version = mad::base_version; ///< BaseVersion, 1
    std::uint8_t mgmt_class = 0;                   ///< MgmtClass (`mad::mgmt_class`)
    std::uint8_t class_version = 0;                ///< ClassVersion
    std::uint8_t method = 0;                       ///< R and Method (`mad::method`)
    std::uint16_t status = 0;                      ///< Status (`mad::status_text`)
    std::uint16_t class_specific = 0;              ///< ClassSpecific
    std::uint64_t transaction_id = 0;              ///< TransactionID
    std::uint16_t attribute_id = 0;                ///< AttributeID
    std::uint16_t reserved = 0;                    ///< Reserved
    std::uint32_t attribute_modifier = 0;          ///< AttributeModifier

    /// True when the R bit is set: the MAD answers a request.
    [[nodiscard]] constexpr bool is_response() const noexcept { return (method & mad::method::response) != 0; }

    /// Field-wise equality.
    friend constexpr bool operator==(mad_header const&, mad_header const&) = default;

    /// Calls `f(name, bit_offset, bit_width, member, show)` for each field in wire order.
    template <class Self, class F>
    static constexpr void for_each_field(Self& s, F&& f) {
        f("BaseVersion", 0, 8, s.base_version, show::dec);
        f("MgmtClass", 8, 8, s.mgmt_class, show::hex);
        f("ClassVersion", 16, 8, s.class_version, show::dec);
        f("Method", 24, 8, s.method, show::hex);
        f("Status", 32, 16, s.status, show::hex);
        f("ClassSpecific", 48, 16, s.class_specific, show::hex);
        f("TransactionID", 64, 64, s.transaction_id, show::hex);
        f("AttributeID", 128, 16, s.attribute_id, show::hex);
        f("Reserved", 144, 16, s.reserved, show::hex);
        f("AttributeModifier", 160, 32, s.attribute_modifier, show::hex);
    }
};

/// The RMPP header: bytes 24 … 35 of an SA MAD or a vendor MAD of range 2 (IBTA 13.6.2,
/// table 178). This library sends with RMPP off: all zero.
struct rmpp_header {
    static constexpr char const* name = "RMPPHeader"; ///< its name in dumps
    static constexpr std::size_t size = 12;           ///< bytes on the wire

    std::uint8_t rmpp_version = 0; ///< RMPPVersion (0: RMPP not used)
    std::uint8_t rmpp_type = 0;    ///< RMPPType
    std::uint8_t r_resp_time = 0;  ///< RRespTime (5 bits)
    std::uint8_t rmpp_flags = 0;   ///< RMPPFlags (3 bits: Active, First, Last)
    std::uint8_t rmpp_status = 0;  ///< RMPPStatus
    std::uint32_t data1 = 0;       ///< Data1 (SegmentNumber)
    std::uint32_t data2 = 0;       ///< Data2 (PayloadLength or NewWindowLast)

    /// Field-wise equality.
    friend constexpr bool operator==(rmpp_header const&, rmpp_header const&) = default;

    /// Calls `f(name, bit_offset, bit_width, member, show)` for each field in wire order.
    template <class Self, class F>
    static constexpr void for_each_field(Self& s, F&& f) {
        f("RMPPVersion", 0, 8, s.rmpp_version, show::dec);
        f("RMPPType", 8, 8, s.rmpp_type, show::dec);
        f("RRespTime", 16, 5, s.r_resp_time, show::dec);
        f("RMPPFlags", 21, 3, s.rmpp_flags, show::hex);
        f("RMPPStatus", 24, 8, s.rmpp_status, show::dec);
        f("Data1", 32, 32, s.data1, show::hex);
        f("Data2", 64, 32, s.data2, show::hex);
    }
};

/// The SA header: bytes 36 … 55 of an SA MAD, after the RMPP header (IBTA 15.2.1.1, table
/// 185); the SA's attribute follows at byte 56.
struct sa_header {
    static constexpr char const* name = "SAHeader"; ///< its name in dumps
    static constexpr std::size_t size = 20;         ///< bytes on the wire

    std::uint64_t sm_key = 0;           ///< SM_Key
    std::uint16_t attribute_offset = 0; ///< AttributeOffset, in 8-byte words (GetTable answers)
    std::uint16_t reserved = 0;         ///< Reserved
    std::uint64_t component_mask = 0;   ///< ComponentMask: which fields of the attribute a query sets

    /// Field-wise equality.
    friend constexpr bool operator==(sa_header const&, sa_header const&) = default;

    /// Calls `f(name, bit_offset, bit_width, member, show)` for each field in wire order.
    template <class Self, class F>
    static constexpr void for_each_field(Self& s, F&& f) {
        f("SM_Key", 0, 64, s.sm_key, show::hex);
        f("AttributeOffset", 64, 16, s.attribute_offset, show::dec);
        f("Reserved", 80, 16, s.reserved, show::hex);
        f("ComponentMask", 96, 64, s.component_mask, show::hex);
    }
};

/// ClassPortInfo (attribute 0x0001 of every GSI class; IBTA 13.4.8.1, table 126): what a class
/// agent supports, its response time, and where it redirects and sends traps. 72 bytes.
struct class_port_info {
    static constexpr char const* name = "ClassPortInfo";               ///< its name in dumps
    static constexpr std::size_t size = 72;                            ///< bytes on the wire
    static constexpr std::uint16_t id = attribute_id::class_port_info; ///< its AttributeID

    std::uint8_t base_version = mad::base_version; ///< BaseVersion
    std::uint8_t class_version = 0;                ///< ClassVersion
    std::uint16_t capability_mask = 0;             ///< CapabilityMask
    std::uint32_t capability_mask2 = 0;            ///< CapabilityMask2 (27 bits)
    std::uint8_t resp_time_value = 0;              ///< RespTimeValue (5 bits: 4.096 µs × 2^value)
    rdmacxx::gid redirect_gid;                     ///< RedirectGID
    std::uint8_t redirect_tc = 0;                  ///< RedirectTC
    std::uint8_t redirect_sl = 0;                  ///< RedirectSL (4 bits)
    std::uint32_t redirect_fl = 0;                 ///< RedirectFL, the flow label (20 bits)
    std::uint16_t redirect_lid = 0;                ///< RedirectLID
    std::uint16_t redirect_p_key = 0;              ///< RedirectP_Key
    std::uint8_t reserved = 0;                     ///< Reserved
    std::uint32_t redirect_qp = 0;                 ///< RedirectQP (24 bits)
    std::uint32_t redirect_q_key = 0;              ///< RedirectQ_Key
    rdmacxx::gid trap_gid;                         ///< TrapGID
    std::uint8_t trap_tc = 0;                      ///< TrapTC
    std::uint8_t trap_sl = 0;                      ///< TrapSL (4 bits)
    std::uint32_t trap_fl = 0;                     ///< TrapFL (20 bits)
    std::uint16_t trap_lid = 0;                    ///< TrapLID
    std::uint16_t trap_p_key = 0;                  ///< TrapP_Key
    std::uint8_t trap_hl = 0;                      ///< TrapHL, the hop limit
    std::uint32_t trap_qp = 0;                     ///< TrapQP (24 bits)
    std::uint32_t trap_q_key = 0;                  ///< TrapQ_Key

    /// Field-wise equality.
    friend constexpr bool operator==(class_port_info const&, class_port_info const&) = default;

    /// Calls `f(name, bit_offset, bit_width, member, show)` for each field in wire order.
    template <class Self, class F>
    static constexpr void for_each_field(Self& s, F&& f) {
        f("BaseVersion", 0, 8, s.base_version, show::dec);
        f("ClassVersion", 8, 8, s.class_version, show::dec);
        f("CapabilityMask", 16, 16, s.capability_mask, show::hex);
        f("CapabilityMask2", 32, 27, s.capability_mask2, show::hex);
        f("RespTimeValue", 59, 5, s.resp_time_value, show::dec);
        f("RedirectGID", 64, 128, s.redirect_gid, show::hex);
        f("RedirectTC", 192, 8, s.redirect_tc, show::hex);
        f("RedirectSL", 200, 4, s.redirect_sl, show::dec);
        f("RedirectFL", 204, 20, s.redirect_fl, show::hex);
        f("RedirectLID", 224, 16, s.redirect_lid, show::hex);
        f("RedirectP_Key", 240, 16, s.redirect_p_key, show::hex);
        f("Reserved", 256, 8, s.reserved, show::hex);
        f("RedirectQP", 264, 24, s.redirect_qp, show::hex);
        f("RedirectQ_Key", 288, 32, s.redirect_q_key, show::hex);
        f("TrapGID", 320, 128, s.trap_gid, show::hex);
        f("TrapTC", 448, 8, s.trap_tc, show::hex);
        f("TrapSL", 456, 4, s.trap_sl, show::dec);
        f("TrapFL", 460, 20, s.trap_fl, show::hex);
        f("TrapLID", 480, 16, s.trap_lid, show::hex);
        f("TrapP_Key", 496, 16, s.trap_p_key, show::hex);
        f("TrapHL", 512, 8, s.trap_hl, show::dec);
        f("TrapQP", 520, 24, s.trap_qp, show::hex);
        f("TrapQ_Key", 544, 32, s.trap_q_key, show::hex);
    }
};

/// PathRecord (SA attribute 0x0035; IBTA 15.2.5.16, table 219): the addressing of a path from
/// SGID to DGID. 64 bytes. `mtu`, `rate` and `packet_life_time` are the specification's codes
/// (MTU 1 = 256 bytes … 5 = 4096; PacketLifeTime 4.096 µs × 2^value); each has a 2-bit
/// selector beside it for queries (0 greater than, 1 less than, 2 exactly, 3 best available).
struct path_record {
    static constexpr char const* name = "PathRecord";              ///< its name in dumps
    static constexpr std::size_t size = 64;                        ///< bytes on the wire
    static constexpr std::uint16_t id = attribute_id::path_record; ///< its AttributeID

    std::uint64_t service_id = 0;               ///< ServiceID
    rdmacxx::gid dgid;                          ///< DGID, the destination port's GID
    rdmacxx::gid sgid;                          ///< SGID, the source port's GID
    std::uint16_t dlid = 0;                     ///< DLID
    std::uint16_t slid = 0;                     ///< SLID
    std::uint8_t raw_traffic = 0;               ///< RawTraffic (1 bit)
    std::uint8_t reserved0 = 0;                 ///< Reserved (3 bits)
    std::uint32_t flow_label = 0;               ///< FlowLabel (20 bits)
    std::uint8_t hop_limit = 0;                 ///< HopLimit
    std::uint8_t t_class = 0;                   ///< TClass, the traffic class
    std::uint8_t reversible = 0;                ///< Reversible (1 bit)
    std::uint8_t num_path = 0;                  ///< NumbPath (7 bits)
    std::uint16_t p_key = 0;                    ///< P_Key
    std::uint16_t qos_class = 0;                ///< QosClass (12 bits)
    std::uint8_t sl = 0;                        ///< SL (4 bits)
    std::uint8_t mtu_selector = 0;              ///< MtuSelector (2 bits)
    std::uint8_t mtu = 0;                       ///< MTU (6 bits)
    std::uint8_t rate_selector = 0;             ///< RateSelector (2 bits)
    std::uint8_t rate = 0;                      ///< Rate (6 bits)
    std::uint8_t packet_life_time_selector = 0; ///< PacketLifeTimeSelector (2 bits)
    std::uint8_t packet_life_time = 0;          ///< PacketLifeTime (6 bits)
    std::uint8_t preference = 0;                ///< Preference
    std::uint64_t reserved1 = 0;                ///< Reserved (48 bits)

    /// ComponentMask bits of a PathRecord query (IBTA table 219's component numbers).
    static constexpr std::uint64_t component_service_id = 0x3;      ///< ServiceID (components 0 and 1)
    static constexpr std::uint64_t component_dgid = 1ULL << 2;      ///< DGID
    static constexpr std::uint64_t component_sgid = 1ULL << 3;      ///< SGID
    static constexpr std::uint64_t component_dlid = 1ULL << 4;      ///< DLID
    static constexpr std::uint64_t component_slid = 1ULL << 5;      ///< SLID
    static constexpr std::uint64_t component_num_path = 1ULL << 12; ///< NumbPath
    static constexpr std::uint64_t component_p_key = 1ULL << 13;    ///< P_Key

    /// Field-wise equality.
    friend constexpr bool operator==(path_record const&, path_record const&) = default;

    /// Calls `f(name, bit_offset, bit_width, member, show)` for each field in wire order.
    template <class Self, class F>
    static constexpr void for_each_field(Self& s, F&& f) {
        f("ServiceID", 0, 64, s.service_id, show::hex);
        f("DGID", 64, 128, s.dgid, show::hex);
        f("SGID", 192, 128, s.sgid, show::hex);
        f("DLID", 320, 16, s.dlid, show::hex);
        f("SLID", 336, 16, s.slid, show::hex);
        f("RawTraffic", 352, 1, s.raw_traffic, show::dec);
        f("Reserved", 353, 3, s.reserved0, show::hex);
        f("FlowLabel", 356, 20, s.flow_label, show::hex);
        f("HopLimit", 376, 8, s.hop_limit, show::dec);
        f("TClass", 384, 8, s.t_class, show::hex);
        f("Reversible", 392, 1, s.reversible, show::dec);
        f("NumbPath", 393, 7, s.num_path, show::dec);
        f("P_Key", 400, 16, s.p_key, show::hex);
        f("QosClass", 416, 12, s.qos_class, show::hex);
        f("SL", 428, 4, s.sl, show::dec);
        f("MtuSelector", 432, 2, s.mtu_selector, show::dec);
        f("MTU", 434, 6, s.mtu, show::dec);
        f("RateSelector", 440, 2, s.rate_selector, show::dec);
        f("Rate", 442, 6, s.rate, show::dec);
        f("PacketLifeTimeSelector", 448, 2, s.packet_life_time_selector, show::dec);
        f("PacketLifeTime", 450, 6, s.packet_life_time, show::dec);
        f("Preference", 456, 8, s.preference, show::dec);
        f("Reserved", 464, 48, s.reserved1, show::hex);
    }
};

/// PortCounters (PerfMgt attribute 0x0012; IBTA 16.1.3.5, table 247): a port's error and
/// traffic counters. 44 bytes, at byte 64 of a PerfMgt MAD. `port_xmit_data` and
/// `port_rcv_data` count 4-byte words.
struct port_counters {
    static constexpr char const* name = "PortCounters";              ///< its name in dumps
    static constexpr std::size_t size = 44;                          ///< bytes on the wire
    static constexpr std::uint16_t id = attribute_id::port_counters; ///< its AttributeID

    std::uint8_t reserved0 = 0;                        ///< Reserved
    std::uint8_t port_select = 0;                      ///< PortSelect
    std::uint16_t counter_select = 0;                  ///< CounterSelect
    std::uint16_t symbol_error_counter = 0;            ///< SymbolErrorCounter
    std::uint8_t link_error_recovery_counter = 0;      ///< LinkErrorRecoveryCounter
    std::uint8_t link_downed_counter = 0;              ///< LinkDownedCounter
    std::uint16_t port_rcv_errors = 0;                 ///< PortRcvErrors
    std::uint16_t port_rcv_remote_physical_errors = 0; ///< PortRcvRemotePhysicalErrors
    std::uint16_t port_rcv_switch_relay_errors = 0;    ///< PortRcvSwitchRelayErrors
    std::uint16_t port_xmit_discards = 0;              ///< PortXmitDiscards
    std::uint8_t port_xmit_constraint_errors = 0;      ///< PortXmitConstraintErrors
    std::uint8_t port_rcv_constraint_errors = 0;       ///< PortRcvConstraintErrors
    std::uint8_t counter_select2 = 0;                  ///< CounterSelect2
    std::uint8_t local_link_integrity_errors = 0;      ///< LocalLinkIntegrityErrors (4 bits)
    std::uint8_t excessive_buffer_overrun_errors = 0;  ///< ExcessiveBufferOverrunErrors (4 bits)
    std::uint16_t reserved1 = 0;                       ///< Reserved
    std::uint16_t vl15_dropped = 0;                    ///< VL15Dropped
    std::uint32_t port_xmit_data = 0;                  ///< PortXmitData (4-byte words)
    std::uint32_t port_rcv_data = 0;                   ///< PortRcvData (4-byte words)
    std::uint32_t port_xmit_pkts = 0;                  ///< PortXmitPkts
    std::uint32_t port_rcv_pkts = 0;                   ///< PortRcvPkts
    std::uint32_t port_xmit_wait = 0;                  ///< PortXmitWait

    /// Field-wise equality.
    friend constexpr bool operator==(port_counters const&, port_counters const&) = default;

    /// Calls `f(name, bit_offset, bit_width, member, show)` for each field in wire order.
    template <class Self, class F>
    static constexpr void for_each_field(Self& s, F&& f) {
        f("Reserved", 0, 8, s.reserved0, show::hex);
        f("PortSelect", 8, 8, s.port_select, show::dec);
        f("CounterSelect", 16, 16, s.counter_select, show::hex);
        f("SymbolErrorCounter", 32, 16, s.symbol_error_counter, show::dec);
        f("LinkErrorRecoveryCounter", 48, 8, s.link_error_recovery_counter, show::dec);
        f("LinkDownedCounter", 56, 8, s.link_downed_counter, show::dec);
        f("PortRcvErrors", 64, 16, s.port_rcv_errors, show::dec);
        f("PortRcvRemotePhysicalErrors", 80, 16, s.port_rcv_remote_physical_errors, show::dec);
        f("PortRcvSwitchRelayErrors", 96, 16, s.port_rcv_switch_relay_errors, show::dec);
        f("PortXmitDiscards", 112, 16, s.port_xmit_discards, show::dec);
        f("PortXmitConstraintErrors", 128, 8, s.port_xmit_constraint_errors, show::dec);
        f("PortRcvConstraintErrors", 136, 8, s.port_rcv_constraint_errors, show::dec);
        f("CounterSelect2", 144, 8, s.counter_select2, show::hex);
        f("LocalLinkIntegrityErrors", 152, 4, s.local_link_integrity_errors, show::dec);
        f("ExcessiveBufferOverrunErrors", 156, 4, s.excessive_buffer_overrun_errors, show::dec);
        f("Reserved", 160, 16, s.reserved1, show::hex);
        f("VL15Dropped", 176, 16, s.vl15_dropped, show::dec);
        f("PortXmitData", 192, 32, s.port_xmit_data, show::dec);
        f("PortRcvData", 224, 32, s.port_rcv_data, show::dec);
        f("PortXmitPkts", 256, 32, s.port_xmit_pkts, show::dec);
        f("PortRcvPkts", 288, 32, s.port_rcv_pkts, show::dec);
        f("PortXmitWait", 320, 32, s.port_xmit_wait, show::dec);
    }
};

static_assert(detail::layout_is_contiguous<mad_header>(), "MADHeader: fields must tile its 24 bytes");
static_assert(detail::layout_is_contiguous<rmpp_header>(), "RMPPHeader: fields must tile its 12 bytes");
static_assert(detail::layout_is_contiguous<sa_header>(), "SAHeader: fields must tile its 20 bytes");
static_assert(detail::layout_is_contiguous<class_port_info>(), "ClassPortInfo: fields must tile its 72 bytes");
static_assert(detail::layout_is_contiguous<path_record>(), "PathRecord: fields must tile its 64 bytes");
static_assert(detail::layout_is_contiguous<port_counters>(), "PortCounters: fields must tile its 44 bytes");

} // namespace mad
} // namespace v0
} // namespace rdmacxx
