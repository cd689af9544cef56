#pragma once
/// @file
/// The umbrella header: everything rdmacxx offers but the opt-in in-flight tracking, whose
/// `checked<C>` strategies (and the mutex, hash maps and ledgers behind them) come only with
/// `#include "rdmacxx/checked.hpp"`.

#include "rdmacxx/version.hpp"

#include "rdmacxx/access.hpp"
#include "rdmacxx/ah.hpp"
#include "rdmacxx/async.hpp"
#include "rdmacxx/bootstrap/bootstrap.hpp"
#include "rdmacxx/bootstrap/peer_group.hpp"
#include "rdmacxx/cm/address.hpp"
#include "rdmacxx/cm/connection.hpp"
#include "rdmacxx/cm/error.hpp"
#include "rdmacxx/cm/event.hpp"
#include "rdmacxx/cm/event_type.hpp"
#include "rdmacxx/cm/id.hpp"
#include "rdmacxx/context.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/device.hpp"
#include "rdmacxx/end_port.hpp"
#include "rdmacxx/endpoint.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"
#include "rdmacxx/in_flight.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/post_policy.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/qp_options.hpp"
#include "rdmacxx/srq.hpp"
#include "rdmacxx/timeouts.hpp"
#include "rdmacxx/transport.hpp"
#include "rdmacxx/wr.hpp"
