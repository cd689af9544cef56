#pragma once
/// @file
/// The umbrella header: everything rdmacxx offers.

#include "rdmacxx/version.hpp"

#include "rdmacxx/access.hpp"
#include "rdmacxx/ah.hpp"
#include "rdmacxx/async.hpp"
#include "rdmacxx/checked.hpp"
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
#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/post_policy.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/srq.hpp"
#include "rdmacxx/transport.hpp"
#include "rdmacxx/wr.hpp"
