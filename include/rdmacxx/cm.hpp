#pragma once
/// @file
/// The connection-manager umbrella: rdmacxx/verbs.hpp and the RDMA CM (`cm::` ids, events,
/// listeners, connections, multicast, private data). Needs librdmacm besides libibverbs
/// (`-lrdmacm -libverbs`). The Asio driver of the CM engine is in rdmacxx/asio/cm_engine.hpp.

#include "rdmacxx/verbs.hpp"

#include "rdmacxx/cm/address.hpp"
#include "rdmacxx/cm/connection.hpp"
#include "rdmacxx/cm/engine.hpp"
#include "rdmacxx/cm/error.hpp"
#include "rdmacxx/cm/event.hpp"
#include "rdmacxx/cm/event_type.hpp"
#include "rdmacxx/cm/handshake.hpp"
#include "rdmacxx/cm/id.hpp"
#include "rdmacxx/cm/listener.hpp"
#include "rdmacxx/cm/monitor.hpp"
#include "rdmacxx/cm/multicast.hpp"
#include "rdmacxx/cm/private_data.hpp"
#include "rdmacxx/cm/resources.hpp"
#include "rdmacxx/cm/verbs_context.hpp"
