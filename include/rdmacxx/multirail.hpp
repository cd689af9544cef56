#pragma once
/// @file
/// Multi-rail connections (libibverbs only): one connection over one RC QP per RDMA device and
/// port, striping, per-rail health, failover and rebuild. See docs/multi-rail.md.
///
/// - rdmacxx/multirail/connection.hpp: `multirail::connection`, `placement`, `event`,
///   `connection_options`, `rails_down_error` (the class in connection_class.hpp, what comes back
///   in protocol.hpp);
/// - rdmacxx/multirail/rail.hpp: `rail_spec`, `rail_state`, `rail_counters`, `region` (memory
///   registered on every rail);
/// - rdmacxx/multirail/window.hpp: the message stream's two windows (internal);
/// - rdmacxx/multirail/wire.hpp: the wire formats (`rail_address`, `remote_region`, the message header).

#include "rdmacxx/multirail/connection.hpp"
#include "rdmacxx/multirail/rail.hpp"
#include "rdmacxx/multirail/wire.hpp"
