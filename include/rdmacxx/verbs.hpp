#pragma once
/// @file
/// The verbs umbrella: everything of rdmacxx that needs libibverbs alone. A program that includes
/// only this header compiles and links with `-libverbs`, without librdmacm (tests/consumers/verbs
/// shows it). The connection manager is in rdmacxx/cm.hpp, both in rdmacxx/rdmacxx.hpp. Left
/// out, as in rdmacxx.hpp: the opt-in in-flight tracking (`#include "rdmacxx/checked.hpp"`), the
/// peer group (`rdmacxx/bootstrap/peer_group.hpp`, `bootstrap/mpi.hpp`) and the Asio adapter
/// (`rdmacxx/asio.hpp`).

#include "rdmacxx/version.hpp"

#include "rdmacxx/access.hpp"
#include "rdmacxx/ah.hpp"
#include "rdmacxx/async.hpp"
#include "rdmacxx/context.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/cq_ex.hpp"
#include "rdmacxx/device.hpp"
#include "rdmacxx/end_port.hpp"
#include "rdmacxx/endpoint.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"
#include "rdmacxx/in_flight.hpp"
#include "rdmacxx/limits.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/memory_window.hpp"
#include "rdmacxx/parent_domain.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/post_policy.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/qp_options.hpp"
#include "rdmacxx/qp_post.hpp"
#include "rdmacxx/qp_settings.hpp"
#include "rdmacxx/qp_state.hpp"
#include "rdmacxx/selective_signaling.hpp"
#include "rdmacxx/srq.hpp"
#include "rdmacxx/thread_domain.hpp"
#include "rdmacxx/timeouts.hpp"
#include "rdmacxx/transport.hpp"
#include "rdmacxx/work_completion.hpp"
#include "rdmacxx/wr.hpp"
#include "rdmacxx/wr_base.hpp"
