#pragma once
/// @file
/// The settings of the Asio adapter's `completion_dispatcher` (rdmacxx/asio/dispatcher.hpp):
/// what a cancellation does on the device (`cancel_mode`), the size of its operation pool
/// (`dispatcher_options`), and how a CQ added to it is served (`cq_mode`).

#include <cstdint>

namespace rdmacxx {
inline namespace v0 {
namespace io {

/// What a terminal cancellation of a posted operation (`async_post`, `async_recv` on a QP) does
/// on the device. Either way its handler runs only once the request's completion has been
/// reaped: when it runs, the request's memory is the caller's again.
enum class cancel_mode {
    /// The operation's QP is moved to ERR: its requests complete flushed, at once, and the
    /// cancelled one completes with `asio::error::operation_aborted` (or with what it completed
    /// with before the flush). The QP's other operations complete with IBV_WC_WR_FLUSH_ERR: a
    /// cancellation ends the QP. The default: a cancellation takes effect within microseconds.
    qp_to_error,
    /// Nothing is done on the device: the handler runs when the request completes by itself,
    /// with its own outcome (a message that arrived, a WRITE that was done). A send-queue request
    /// completes within the time its QP's retry settings imply; a receive only when a message
    /// arrives or its QP goes to ERR.
    wait,
};

/// Settings of a `completion_dispatcher`.
struct dispatcher_options {
    /// Operation slots in its pool: operations in flight at most, cancelled ones whose
    /// completion has not been reaped yet included. Allocated once, at construction.
    std::uint32_t max_operations = 1024;
    /// What cancelling a posted operation does (see `cancel_mode`).
    cancel_mode cancel = cancel_mode::qp_to_error;
};

/// How a CQ added to a `completion_dispatcher` is served.
enum class cq_mode {
    routed, ///< every completion goes to the operation whose slot its `wr_id` names (`async_post`, `async_recv`)
    batch,  ///< completions are handed out in batches to `async_wait(dispatcher, cq, out, token)`
};

} // namespace io
} // namespace v0
} // namespace rdmacxx
