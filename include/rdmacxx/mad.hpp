#pragma once
/// @file
/// The management-datagram umbrella: typed MADs over libibumad (the `mad::` namespace): the
/// wire layout of the MAD headers and attributes, and the MAD error family. Needs libibumad
/// besides libibverbs (`-libumad -libverbs`; Debian's libibumad-dev). Not part of
/// rdmacxx/rdmacxx.hpp, which stays verbs and CM.

#include "rdmacxx/verbs.hpp"

#include "rdmacxx/mad/attributes.hpp"
#include "rdmacxx/mad/error.hpp"
#include "rdmacxx/mad/fields.hpp"
#include "rdmacxx/mad/packet.hpp"
#include "rdmacxx/mad/types.hpp"
