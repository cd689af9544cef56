#pragma once
/// @file
/// SA path records, as python-rdma's `rdma.path` asks for them: `mad::resolve_path` sends a
/// SubnAdmGet(PathRecord) for a source and destination GID to a subnet administrator, and
/// `mad::apply` turns the record into the settings a connected QP takes (`qp_settings`: path
/// MTU, SL, hop limit, traffic class, flow label). RoCE fabrics have no SA: there the caller
/// names an agent that serves the SA class (tests/multinode/mad_test.cpp has one).

#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"
#include "rdmacxx/mad/agent.hpp"
#include "rdmacxx/mad/attributes.hpp"
#include "rdmacxx/mad/packet.hpp"
#include "rdmacxx/mad/port.hpp"
#include "rdmacxx/mad/types.hpp"
#include "rdmacxx/qp_settings.hpp"

#include <cstdint>
#include <string>

namespace rdmacxx {
inline namespace v0 {
namespace mad {

/// The SA's class version this library speaks (IBTA 1.2: 2).
inline constexpr std::uint8_t sa_class_version = 2;

/// Asks the SA at `sa_at` for the PathRecord from `source` to `destination` with a
/// SubnAdmGet(PathRecord) whose ComponentMask names DGID and SGID (and NumbPath 1), through
/// `sa`, an agent of the SA class (`mgmt_class::subn_adm`, version 2). Blocks for at most
/// `options.bound()`.
/// @returns the record the SA answered with.
/// @throws argument_error when `sa` is not an SA agent of version 2 (nothing is sent);
///         sa_path_not_found_error when the SA has no path (ERR_NO_RECORDS);
///         mad_class_error for another SA status; mad_timeout_error when the SA does not answer;
///         mad_error as `agent::call` — each with "Failed getting a PathRecord from … to …"
///         stacked on top (python-rdma's "Failed getting MAD path record for end port …").
/// Thread-safety: as `agent::call`.
/// @see umad_send(3), IBTA 15.2.5.16 (PathRecord)
[[nodiscard]] inline path_record resolve_path(agent& sa, address const& sa_at, rdmacxx::gid const& source,
                                              rdmacxx::gid const& destination, rpc_options const& options = {}) {
    if (sa.mgmt_class() != mgmt_class::subn_adm || sa.class_version() != sa_class_version)
        throw argument_error("resolve_path needs an agent of the SA class (SubnAdm, version 2), not " +
                             class_name(sa.mgmt_class()) + " version " + std::to_string(sa.class_version()));
    packet query = sa.make_request(method::get, path_record::id);
    sa_header h;
    h.component_mask = path_record::component_dgid | path_record::component_sgid | path_record::component_num_path;
    query.set_sa_header(h);
    path_record wanted;
    wanted.dgid = destination;
    wanted.sgid = source;
    wanted.num_path = 1;
    query.set_attribute(wanted);
    try {
        return sa.call(query, sa_at, options).attribute<path_record>();
    } catch (rdmacxx::error& e) {
        e.push_context("Failed getting a PathRecord from " + source.to_string() + " to " + destination.to_string() +
                       " of the SA at " + sa_at.gid.to_string());
        throw;
    }
}

/// Sets in `settings` what the path record `path` says of the path: the path MTU (its MTU code,
/// 1 … 5 = 256 … 4096 bytes), the SL, and for the GRH the hop limit, traffic class and flow
/// label. Other settings are left as they are.
/// @throws argument_error when the record's MTU code is not 1 … 5 (nothing is changed then).
inline void apply(path_record const& path, qp_settings& settings) {
    if (path.mtu < 1 || path.mtu > 5)
        throw argument_error("PathRecord.MTU = " + std::to_string(path.mtu) + " is no path MTU (1 … 5)");
    settings.path_mtu = static_cast<ibv_mtu>(path.mtu);
    settings.service_level = path.sl;
    settings.hop_limit = path.hop_limit;
    settings.traffic_class = path.t_class;
    settings.flow_label = path.flow_label;
}

} // namespace mad
} // namespace v0
} // namespace rdmacxx
