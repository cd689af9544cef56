#pragma once
/// @file
/// The umbrella header: the verbs (rdmacxx/verbs.hpp, libibverbs) and the connection manager
/// (rdmacxx/cm.hpp, librdmacm). Included on their own: the opt-in in-flight tracking, whose
/// `checked<C>` strategies (and the mutex, hash maps and ledgers behind them) come only with
/// `#include "rdmacxx/checked.hpp"`; the peer group (`rdmacxx/bootstrap/peer_group.hpp`, with
/// `bootstrap/mpi.hpp` for MPI, `bootstrap/pmix.hpp` for PMIx); the Asio adapter
/// (`rdmacxx/asio.hpp`).

#include "rdmacxx/cm.hpp"
#include "rdmacxx/verbs.hpp"
