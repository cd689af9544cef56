#pragma once
/// @file
/// The Asio adapter (optional; standalone Asio 1.22 or later, `#include <asio.hpp>`'s library, or
/// Boost.Asio from Boost 1.81 with `RDMACXX_ASIO_BOOST` defined to 1: rdmacxx/asio/net.hpp):
/// RDMA completions, RDMA CM steps and device async events as Asio asynchronous operations.
/// Every operation takes a completion token: a callback, `asio::use_future`,
/// `asio::experimental::deferred` or `asio::use_awaitable` (C++20 coroutines), or none
/// (`io::default_token_t`), and completes with `void(io::error_code, T)` whatever the token;
/// `co_await` throws the library's exception (`io::as_exception` hands it to any other token). Nothing else in
/// rdmacxx includes Asio, and the umbrella rdmacxx.hpp does not include this header.
///
/// Everything here is in namespace `rdmacxx::io` (not `rdmacxx::asio`, which would shadow
/// `::asio` for code that says `using namespace rdmacxx;`): `rdmacxx::io::completion_dispatcher`,
/// `rdmacxx::io::async_post`, and so on, beside `asio::io_context`.
///
/// - rdmacxx/asio/completion_queue.hpp, rdmacxx/asio/queue_pair.hpp,
///   rdmacxx/asio/shared_receive_queue.hpp: the I/O objects, `io::completion_queue` (a CQ routed
///   by its context's dispatcher from the start), `io::queue_pair` (a QP on one; `io::connection`,
///   a CM connection on one, is in cm_engine.hpp) and `io::shared_receive_queue`, with
///   `get_executor()` and their operations as members;
/// - rdmacxx/asio/net.hpp: which Asio (`io::net`), and `io::error_code`;
/// - rdmacxx/asio/completion.hpp: the completion signature, `as_exception`, `default_token_t`;
/// - rdmacxx/asio/dispatcher.hpp: `completion_dispatcher`, which routes completions to operations
///   (its settings in dispatcher_options.hpp; its slot pool, CQ set and receive pools' routes in
///   slot_pool.hpp, cq_entry.hpp and pool_routes.hpp, internal);
/// - rdmacxx/asio/service.hpp: `dispatcher_for`, the dispatcher of a channel owned by the
///   io_context (`dispatcher_service`);
/// - rdmacxx/asio/operations.hpp: `async_post`, `chain`, `async_recv`, `async_wait` (a CQ batch);
/// - rdmacxx/asio/receive_pool.hpp: `receive_pool` (receives kept posted) and its
///   `async_receive`, a receive to bound by a timer;
/// - rdmacxx/asio/loan.hpp: `loan`, memory lent to a peer through a type 2 window whose wait for
///   the peer's notice revokes the window by itself when it ends without one (a timeout);
/// - rdmacxx/asio/cm_engine.hpp: `cm_engine` (the Asio driver of the CM engine), `cm_engine_for`
///   (the context's own, `cm_engine_service`), `cm_acceptor`, `async_connect`, `async_accept`;
/// - rdmacxx/asio/events.hpp: `async_event_stream` and its `async_wait` (device async events),
///   `async_events_for` (a device's stream owned by the context, `async_event_service`);
/// - rdmacxx/asio/thread_rule.hpp: `thread_error`, the refusal of a second thread;
/// - rdmacxx/asio/descriptor.hpp: the duplicated descriptors they wait on (internal);
/// - rdmacxx/asio/op_slot.hpp, rdmacxx/asio/post_pool.hpp: the dispatcher's operation slots and
///   the pool its posted handlers are allocated from (internal).
///
/// See docs/asio.md.

#include "rdmacxx/asio/cm_engine.hpp"
#include "rdmacxx/asio/completion.hpp"
#include "rdmacxx/asio/completion_queue.hpp"
#include "rdmacxx/asio/descriptor.hpp"
#include "rdmacxx/asio/dispatcher.hpp"
#include "rdmacxx/asio/events.hpp"
#include "rdmacxx/asio/loan.hpp"
#include "rdmacxx/asio/net.hpp"
#include "rdmacxx/asio/op_slot.hpp"
#include "rdmacxx/asio/operations.hpp"
#include "rdmacxx/asio/post_pool.hpp"
#include "rdmacxx/asio/queue_pair.hpp"
#include "rdmacxx/asio/receive_pool.hpp"
#include "rdmacxx/asio/service.hpp"
#include "rdmacxx/asio/shared_receive_queue.hpp"
#include "rdmacxx/asio/thread_rule.hpp"
