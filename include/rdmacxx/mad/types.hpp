#pragma once
/// @file
/// The numbers of the MAD world, with their names for messages: management classes, methods,
/// attribute IDs, the common status field and the SA's class-specific status codes (InfiniBand
/// Architecture Specification vol. 1, chapters 13.4 and 15.2).

#include <cstddef>
#include <cstdint>
#include <string>

namespace rdmacxx {
inline namespace v0 {
namespace mad {

/// The MAD BaseVersion this library sends and accepts.
inline constexpr std::uint8_t base_version = 1;
/// The length of every MAD without RMPP, in bytes (IBTA 13.4.1).
inline constexpr std::size_t mad_size = 256;
/// The QP every GSI class is addressed to (IBTA 13.5.1).
inline constexpr std::uint32_t gsi_qpn = 1;
/// The Q_Key of QP1 (IBTA 13.5.1).
inline constexpr std::uint32_t gsi_qkey = 0x80010000;

/// Management classes (MgmtClass, IBTA table 104).
namespace mgmt_class {
inline constexpr std::uint8_t subn_lid_routed = 0x01;     ///< SMP, LID routed (QP0)
inline constexpr std::uint8_t subn_adm = 0x03;            ///< subnet administration (SA)
inline constexpr std::uint8_t perf_mgt = 0x04;            ///< performance management
inline constexpr std::uint8_t bm = 0x05;                  ///< baseboard management
inline constexpr std::uint8_t dev_mgt = 0x06;             ///< device management
inline constexpr std::uint8_t comm_mgt = 0x07;            ///< communication management (CM)
inline constexpr std::uint8_t snmp = 0x08;                ///< SNMP tunneling
inline constexpr std::uint8_t vendor_range1_first = 0x09; ///< first vendor-specific class, range 1
inline constexpr std::uint8_t vendor_range1_last = 0x0f;  ///< last vendor-specific class, range 1
inline constexpr std::uint8_t application_first = 0x10;   ///< first application-specific class
inline constexpr std::uint8_t application_last = 0x2f;    ///< last application-specific class
inline constexpr std::uint8_t vendor_range2_first = 0x30; ///< first vendor class with an OUI (range 2)
inline constexpr std::uint8_t vendor_range2_last = 0x4f;  ///< last vendor class with an OUI (range 2)
inline constexpr std::uint8_t subn_directed_route = 0x81; ///< SMP, directed route (QP0)
} // namespace mgmt_class

/// Methods (Method, IBTA table 105, and the SA's, table 187); a response has bit 7 set.
namespace method {
inline constexpr std::uint8_t get = 0x01;             ///< Get()
inline constexpr std::uint8_t set = 0x02;             ///< Set()
inline constexpr std::uint8_t send = 0x03;            ///< Send()
inline constexpr std::uint8_t trap = 0x05;            ///< Trap()
inline constexpr std::uint8_t report = 0x06;          ///< Report()
inline constexpr std::uint8_t trap_repress = 0x07;    ///< TrapRepress()
inline constexpr std::uint8_t get_table = 0x12;       ///< SubnAdmGetTable()
inline constexpr std::uint8_t get_trace_table = 0x13; ///< SubnAdmGetTraceTable()
inline constexpr std::uint8_t get_multi = 0x14;       ///< SubnAdmGetMulti()
inline constexpr std::uint8_t del = 0x15;             ///< SubnAdmDelete()
inline constexpr std::uint8_t response = 0x80;        ///< the R bit: OR-ed into a request's method
inline constexpr std::uint8_t get_resp = 0x81;        ///< GetResp()
inline constexpr std::uint8_t report_resp = 0x86;     ///< ReportResp()
inline constexpr std::uint8_t get_table_resp = 0x92;  ///< SubnAdmGetTableResp()
} // namespace method

/// Attribute IDs (AttributeID) used by this library.
namespace attribute_id {
inline constexpr std::uint16_t class_port_info = 0x0001; ///< ClassPortInfo, every GSI class
inline constexpr std::uint16_t port_counters = 0x0012;   ///< PortCounters, PerfMgt
inline constexpr std::uint16_t path_record = 0x0035;     ///< PathRecord, SA
} // namespace attribute_id

/// The SA's class-specific status codes: bits 8 … 15 of Status (IBTA table 188).
namespace sa_status {
inline constexpr std::uint8_t no_resources = 1;                ///< ERR_NO_RESOURCES
inline constexpr std::uint8_t req_invalid = 2;                 ///< ERR_REQ_INVALID
inline constexpr std::uint8_t no_records = 3;                  ///< ERR_NO_RECORDS
inline constexpr std::uint8_t too_many_records = 4;            ///< ERR_TOO_MANY_RECORDS
inline constexpr std::uint8_t req_invalid_gid = 5;             ///< ERR_REQ_INVALID_GID
inline constexpr std::uint8_t req_insufficient_components = 6; ///< ERR_REQ_INSUFFICIENT_COMPONENTS
inline constexpr std::uint8_t req_denied = 7;                  ///< ERR_REQ_DENIED
inline constexpr std::uint8_t status_prio_suggested = 8;       ///< ERR_STATUS_PRIO_SUGGESTED
} // namespace sa_status

/// The name of a management class: "SubnAdm", "PerfMgt", … or "class 0x2a".
[[nodiscard]] inline std::string class_name(std::uint8_t c) {
    switch (c) {
    case mgmt_class::subn_lid_routed:
        return "SubnLidRouted";
    case mgmt_class::subn_adm:
        return "SubnAdm";
    case mgmt_class::perf_mgt:
        return "PerfMgt";
    case mgmt_class::bm:
        return "BM";
    case mgmt_class::dev_mgt:
        return "DevMgt";
    case mgmt_class::comm_mgt:
        return "ComMgt";
    case mgmt_class::snmp:
        return "SNMP";
    case mgmt_class::subn_directed_route:
        return "SubnDirectedRoute";
    default:
        break;
    }
    static constexpr char digits[] = "0123456789abcdef";
    std::string s = "class 0x";
    s += digits[c >> 4];
    s += digits[c & 0xfU];
    if (c >= mgmt_class::vendor_range1_first && c <= mgmt_class::vendor_range1_last) s += " (vendor)";
    if (c >= mgmt_class::application_first && c <= mgmt_class::application_last) s += " (application)";
    if (c >= mgmt_class::vendor_range2_first && c <= mgmt_class::vendor_range2_last) s += " (vendor, OUI)";
    return s;
}

/// True for the vendor classes of range 2 (0x30 … 0x4F), whose MADs carry an OUI and whose
/// agents register with umad_register_oui(3).
[[nodiscard]] constexpr bool is_vendor_oui_class(std::uint8_t c) noexcept {
    return c >= mgmt_class::vendor_range2_first && c <= mgmt_class::vendor_range2_last;
}

/// The name of a method as python-rdma prints it, e.g. "MAD_METHOD_GET(1)",
/// "MAD_METHOD_GET_RESP(129)", "method 0x2a(42)".
[[nodiscard]] inline std::string method_name(std::uint8_t m) {
    char const* n = nullptr;
    switch (m) {
    case method::get:
        n = "MAD_METHOD_GET";
        break;
    case method::set:
        n = "MAD_METHOD_SET";
        break;
    case method::send:
        n = "MAD_METHOD_SEND";
        break;
    case method::trap:
        n = "MAD_METHOD_TRAP";
        break;
    case method::report:
        n = "MAD_METHOD_REPORT";
        break;
    case method::trap_repress:
        n = "MAD_METHOD_TRAP_REPRESS";
        break;
    case method::get_table:
        n = "MAD_METHOD_GET_TABLE";
        break;
    case method::get_trace_table:
        n = "MAD_METHOD_GET_TRACE_TABLE";
        break;
    case method::get_multi:
        n = "MAD_METHOD_GET_MULTI";
        break;
    case method::del:
        n = "MAD_METHOD_DELETE";
        break;
    case method::get_resp:
        n = "MAD_METHOD_GET_RESP";
        break;
    case method::report_resp:
        n = "MAD_METHOD_REPORT_RESP";
        break;
    case method::get_table_resp:
        n = "MAD_METHOD_GET_TABLE_RESP";
        break;
    default:
        return "method " + std::to_string(m);
    }
    return std::string{n} + "(" + std::to_string(m) + ")";
}

/// The name of an attribute of class `c`: "ClassPortInfo", "PathRecord", "PortCounters", or
/// "attribute 0x1234".
[[nodiscard]] inline std::string attribute_name(std::uint8_t c, std::uint16_t id) {
    if (id == attribute_id::class_port_info) return "ClassPortInfo";
    if (c == mgmt_class::subn_adm && id == attribute_id::path_record) return "SAPathRecord";
    if (c == mgmt_class::perf_mgt && id == attribute_id::port_counters) return "PMPortCounters";
    static constexpr char digits[] = "0123456789abcdef";
    std::string s = "attribute 0x";
    for (unsigned shift = 16; shift != 0;) {
        shift -= 4;
        s += digits[(static_cast<unsigned>(id) >> shift) & 0xfU];
    }
    return s;
}

/// What the common part of a MAD Status says (IBTA table 11), e.g. 0x000C → "the method/attribute
/// combination is not supported"; "success" for 0, and the class-specific bits 8 … 15 as
/// "class-specific status N".
[[nodiscard]] inline std::string status_text(std::uint16_t status) {
    if (status == 0) return "success";
    std::string s;
    auto add = [&s](std::string const& part) {
        if (!s.empty()) s += ", ";
        s += part;
    };
    if ((status & 0x0001U) != 0) add("busy");
    if ((status & 0x0002U) != 0) add("redirect");
    switch ((status >> 2) & 0x7U) {
    case 0:
        break;
    case 1:
        add("bad base or class version");
        break;
    case 2:
        add("the method is not supported");
        break;
    case 3:
        add("the method/attribute combination is not supported");
        break;
    case 7:
        add("an attribute or attribute modifier field holds an invalid value");
        break;
    default:
        add("invalid field code " + std::to_string((status >> 2) & 0x7U));
        break;
    }
    if (unsigned const cs = (status >> 8) & 0xffU; cs != 0) add("class-specific status " + std::to_string(cs));
    return s;
}

/// The name of an SA class-specific status (bits 8 … 15 of Status): "ERR_NO_RECORDS", …, or
/// "SA status N".
[[nodiscard]] inline std::string sa_status_name(std::uint8_t code) {
    switch (code) {
    case sa_status::no_resources:
        return "ERR_NO_RESOURCES";
    case sa_status::req_invalid:
        return "ERR_REQ_INVALID";
    case sa_status::no_records:
        return "ERR_NO_RECORDS";
    case sa_status::too_many_records:
        return "ERR_TOO_MANY_RECORDS";
    case sa_status::req_invalid_gid:
        return "ERR_REQ_INVALID_GID";
    case sa_status::req_insufficient_components:
        return "ERR_REQ_INSUFFICIENT_COMPONENTS";
    case sa_status::req_denied:
        return "ERR_REQ_DENIED";
    case sa_status::status_prio_suggested:
        return "ERR_STATUS_PRIO_SUGGESTED";
    default:
        return "SA status " + std::to_string(code);
    }
}

} // namespace mad
} // namespace v0
} // namespace rdmacxx
