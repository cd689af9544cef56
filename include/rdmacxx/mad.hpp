#pragma once
/// @file
/// The management-datagram umbrella: typed MADs over libibumad (the `mad::` namespace): the
/// wire layout of the MAD headers and attributes, the MAD error family, umad ports opened from
/// end-port descriptions, agents that make RPCs (timeouts, retries) and serve a class, and SA
/// path records (`resolve_path`). Needs libibumad
/// besides libibverbs (`-libumad -libverbs`; Debian's libibumad-dev). Not part of
/// rdmacxx/rdmacxx.hpp, which stays verbs and CM.

#include "rdmacxx/verbs.hpp"

#include "rdmacxx/mad/agent.hpp"
#include "rdmacxx/mad/attributes.hpp"
#include "rdmacxx/mad/error.hpp"
#include "rdmacxx/mad/fields.hpp"
#include "rdmacxx/mad/packet.hpp"
#include "rdmacxx/mad/port.hpp"
#include "rdmacxx/mad/sa.hpp"
#include "rdmacxx/mad/types.hpp"
