#pragma once
/// @file
/// The rdmacxx error hierarchy, layered as python-rdma's: one root, `rdmacxx::error`, and below
/// it system errors (`sys_error`), work-request errors (`wr_error`), work-completion errors
/// (`wc_error`), asynchronous-event errors (`async_error`) and bad-input errors (`argument_error`). Every error carries
/// a stack of context messages that grows as it crosses layers and prints itself with `dump_detailed`.

#include "rdmacxx/detail/verbs.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {

/// The error category of work-completion status codes (`enum ibv_wc_status`): value 0 is
/// success, every other value is the status of a failed completion, and `message()` is the
/// text of ibv_wc_status_str(3).
/// Thread-safety: the category object is immutable and shared.
[[nodiscard]] inline std::error_category const& wc_category() noexcept {
    struct category final : std::error_category {
        [[nodiscard]] char const* name() const noexcept override { return "rdmacxx.wc_status"; }
        [[nodiscard]] std::string message(int value) const override {
            return ::ibv_wc_status_str(static_cast<ibv_wc_status>(value));
        }
    };
    static category const instance;
    return instance;
}

/// Makes a `std::error_code` in `wc_category()` from a completion status.
[[nodiscard]] inline std::error_code make_wc_error_code(ibv_wc_status status) noexcept {
    return {static_cast<int>(status), wc_category()};
}

/// The error category of asynchronous event types (`enum ibv_event_type`): `message()` is the
/// text of ibv_event_type_str(3), e.g. "QP access error". Every value is an event, so no value
/// means success here: only `async_error` carries codes of this category.
/// Thread-safety: the category object is immutable and shared.
[[nodiscard]] inline std::error_category const& async_category() noexcept {
    struct category final : std::error_category {
        [[nodiscard]] char const* name() const noexcept override { return "rdmacxx.async_event"; }
        [[nodiscard]] std::string message(int value) const override {
            return ::ibv_event_type_str(static_cast<ibv_event_type>(value));
        }
    };
    static category const instance;
    return instance;
}

/// Makes a `std::error_code` in `async_category()` from an asynchronous event type.
[[nodiscard]] inline std::error_code make_async_error_code(ibv_event_type type) noexcept {
    return {static_cast<int>(type), async_category()};
}

namespace detail {
/// `v` in lower-case hex digits, without `0x`.
[[nodiscard]] inline std::string hex(std::uint64_t v) {
    static constexpr char digits[] = "0123456789abcdef";
    char buf[16];
    std::size_t n = 0;
    do {
        buf[15 - n++] = digits[v & 0xf];
        v >>= 4;
    } while (v != 0);
    return {buf + 16 - n, n};
}

/// The name of a work request opcode (`ibv_wr_opcode`) as rdmacxx's work requests spell it;
/// -1 is a receive.
[[nodiscard]] inline std::string wr_opcode_name(int opcode) {
    switch (opcode) {
    case -1:
        return "RECV";
    case IBV_WR_SEND:
        return "SEND";
    case IBV_WR_SEND_WITH_IMM:
        return "SEND with immediate";
    case IBV_WR_RDMA_WRITE:
        return "RDMA WRITE";
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return "RDMA WRITE with immediate";
    case IBV_WR_RDMA_READ:
        return "RDMA READ";
    case IBV_WR_ATOMIC_CMP_AND_SWP:
        return "atomic compare-and-swap";
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        return "atomic fetch-and-add";
    default:
        return "opcode " + std::to_string(opcode);
    }
}

/// `text` in double quotes, for a message; a NUL character is written `\0` (so the message is
/// not cut short where it is read as a C string).
[[nodiscard]] inline std::string quoted(std::string_view text) {
    std::string s = "\"";
    for (char const c : text) {
        if (c == '\0')
            s += "\\0";
        else
            s += c;
    }
    s += '"';
    return s;
}

/// True for the opcodes that carry a remote address and rkey.
[[nodiscard]] constexpr bool is_remote_opcode(int opcode) noexcept {
    return opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM || opcode == IBV_WR_RDMA_READ ||
           opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}
} // namespace detail

/// The root of every exception rdmacxx throws.
///
/// It is a `std::system_error`, so `code()` interoperates with `std::error_code` (errno
/// values are in `std::system_category()`, completion statuses in `wc_category()`).
/// Beside the code it holds a stack of messages: the lowest layer's message first, and one more
/// for each layer that called `push_context` on the way up. `what()` reads top to bottom.
/// Copying is cheap and does not throw (the state is shared, as in `std::runtime_error`).
/// Thread-safety: as for any exception object; do not push context from two threads at once.
class error : public std::system_error {
public:
    /// Builds an error from its code and the lowest layer's message.
    error(std::error_code code, std::string message) : std::system_error(code), state_(std::make_shared<state>()) {
        state_->messages.push_back(std::move(message));
        compose();
    }

    /// Adds a higher layer's message on top of the stack (python-rdma's stacked messages) and
    /// returns `*this`, so that `catch (rdmacxx::error& e) { e.push_context("…"); throw; }`
    /// reads naturally.
    error& push_context(std::string message) {
        state_->messages.push_back(std::move(message));
        compose();
        return *this;
    }

    /// The message stack, lowest layer first.
    [[nodiscard]] std::span<std::string const> messages() const noexcept { return state_->messages; }

    /// The messages, top layer first, joined by ": ", then the code's message in parentheses.
    [[nodiscard]] char const* what() const noexcept override { return state_->what.c_str(); }

    /// Prints the error for a person, in the shape python-rdma's `dump_detailed` prints
    /// (`E: Failed …` then `E: +…`): level 0: one line, the top message; level 1: the top message, then each lower
    /// layer's message on its own line after a `+`, and the error code; level 2 and above: also the work request, work
    /// completion or attributes involved, one `name: value` line each. Every line starts with `prefix` and a space
    /// (none when the prefix is empty).
    void dump_detailed(std::ostream& os, std::string_view prefix = "E:", int level = 1) const {
        std::string const lead = prefix.empty() ? std::string{} : std::string{prefix} + ' ';
        auto const& msgs = state_->messages;
        os << lead << msgs.back() << '\n';
        if (level < 1) return;
        for (auto it = msgs.rbegin() + 1; it != msgs.rend(); ++it)
            os << lead << '+' << *it << '\n';
        os << lead << '+' << code().category().name() << ' ' << code().value() << ": " << code().message() << '\n';
        if (level < 2) return;
        dump_attributes(os, lead + "  ");
    }

    error(error const&) noexcept = default;
    error& operator=(error const&) noexcept = default;
    ~error() override = default;

protected:
    /// Prints the level-2 details (`name: value` lines, each after `lead`); the root has none.
    virtual void dump_attributes(std::ostream& /*os*/, std::string const& /*lead*/) const {}

private:
    struct state {
        std::vector<std::string> messages;
        std::string what;
    };

    void compose() {
        std::string text;
        auto const& msgs = state_->messages;
        for (std::size_t i = msgs.size(); i-- > 0;) {
            if (!text.empty()) text += ": ";
            text += msgs[i];
        }
        text += " (";
        text += code().message();
        text += ')';
        state_->what = std::move(text);
    }

    std::shared_ptr<state> state_;
};

/// A system call or verb that failed (python-rdma's `SysError`): names the verb and carries its
/// errno in `std::system_category()`.
class sys_error : public error {
public:
    /// @param err   the errno value the verb reported
    /// @param verb  the C function that failed, e.g. "ibv_modify_qp"
    /// @param what  what rdmacxx was doing, e.g. "moving QP 17 from INIT to RTR"
    sys_error(int err, std::string verb, std::string what)
        : error(std::error_code{err, std::system_category()}, message(verb, std::move(what))), verb_(std::move(verb)) {}

    /// The C function that failed.
    [[nodiscard]] std::string const& verb() const noexcept { return verb_; }
    /// The errno value it reported.
    [[nodiscard]] int errno_value() const noexcept { return code().value(); }

protected:
    void dump_attributes(std::ostream& os, std::string const& lead) const override {
        os << lead << "verb: " << verb_ << '\n' << lead << "errno: " << code().value() << '\n';
    }

private:
    // "VERB failed WHAT", or "VERB failed" when there is no WHAT.
    static std::string message(std::string const& verb, std::string what) {
        if (what.empty()) return verb + " failed";
        what.insert(0, verb + " failed ");
        return what;
    }

    std::string verb_;
};

/// A device or kernel that does not have what was asked of it: a verb the provider does not
/// implement, a capability or a field it lacks. The message names the verb, what was asked and
/// the device; the errno is the one the verb gave (EOPNOTSUPP, ENOSYS, EPROTONOSUPPORT, or
/// EINVAL from the verbs whose manual says it means "not supported"). Errno values map to it in
/// one place, `detail::throw_verb`. Catch it to fall back to what the device does have; it is
/// a `sys_error`, so code that does not care still sees the verb and errno.
class not_supported_error : public sys_error {
public:
    /// @param err   the errno value the verb reported
    /// @param verb  the C function that refused, e.g. "ibv_alloc_td"
    /// @param what  what was asked, naming the device, e.g. "on rxe0: thread domains"
    not_supported_error(int err, std::string verb, std::string what)
        : sys_error(err, std::move(verb), std::move(what)) {}
};

/// Bad input refused before anything reached the device: a span outside its region, a message
/// over the path MTU, too much inline data, an unparsable GID, a misaligned atomic target.
/// Its code is `std::errc::invalid_argument` (or the one named at construction).
class argument_error : public error {
public:
    /// @param message what was wrong, quoting the input
    /// @param code    the error condition, `std::errc::invalid_argument` unless another fits better
    explicit argument_error(std::string message, std::errc code = std::errc::invalid_argument)
        : error(std::make_error_code(code), std::move(message)) {}
};

/// An object used after the object it was made from (its parent: the context of a PD, the PD
/// of a QP, the QP of a `selective_signaling`, …) was destroyed, or replaced by a move
/// assignment: what would otherwise read freed memory (see docs/ownership.md). Its code is
/// `std::errc::owner_dead`.
class orphaned_error : public error {
public:
    /// @param message which object and which parent
    explicit orphaned_error(std::string message)
        : error(std::make_error_code(std::errc::owner_dead), std::move(message)) {}
};

/// A work request the provider refused to post (python-rdma's `WRError`): `bad_index()` is the
/// position of the refused request in the chain that was posted (0 for a single request); the
/// requests before it were posted and will complete, the ones from it on were not.
class wr_error : public error {
public:
    /// @param err        the errno value returned by ibv_post_send(3) / ibv_post_recv(3)
    /// @param verb       "ibv_post_send" or "ibv_post_recv"
    /// @param bad_index  the position of the refused request in its chain
    /// @param wr_id      the refused request's `wr_id`
    /// @param opcode     the refused request's opcode (`ibv_wr_opcode`), or -1 for a receive
    /// @param qp_num     the QP number it was posted to
    wr_error(int err, std::string const& verb, std::size_t bad_index, std::uint64_t wr_id, int opcode,
             std::uint32_t qp_num)
        : error(std::error_code{err, std::system_category()}, verb + " refused work request " +
                                                                  std::to_string(bad_index) + " of its chain on QP " +
                                                                  std::to_string(qp_num)),
          bad_index_(bad_index), wr_id_(wr_id), opcode_(opcode), qp_num_(qp_num) {}

    /// Position of the refused request in the chain (0-based).
    [[nodiscard]] std::size_t bad_index() const noexcept { return bad_index_; }
    /// The refused request's `wr_id`.
    [[nodiscard]] std::uint64_t wr_id() const noexcept { return wr_id_; }
    /// The refused request's `ibv_wr_opcode`, or -1 for a receive request.
    [[nodiscard]] int opcode() const noexcept { return opcode_; }
    /// The QP number the chain was posted to.
    [[nodiscard]] std::uint32_t qp_num() const noexcept { return qp_num_; }

protected:
    void dump_attributes(std::ostream& os, std::string const& lead) const override {
        os << lead << "bad_index: " << bad_index_ << '\n'
           << lead << "wr_id: " << wr_id_ << '\n'
           << lead << "opcode: " << detail::wr_opcode_name(opcode_) << '\n'
           << lead << "qp_num: " << qp_num_ << '\n';
    }

private:
    std::size_t bad_index_;
    std::uint64_t wr_id_;
    int opcode_;
    std::uint32_t qp_num_;
};

/// Which queue a failed completion belongs to, as far as it is known. A failed completion's
/// `opcode` is undefined (ibv_poll_cq(3): only `wr_id`, `status`, `qp_num` and `vendor_err` are
/// valid), so the side is known only to whoever posted the request: `checked` tracking, or a
/// caller that tells `wc_error` itself.
enum class completion_side {
    unknown, ///< not known: an untracked completion
    send,    ///< a send-queue request
    receive, ///< a receive-queue request
};

/// What in-flight tracking (`checked<C>`, checked.hpp) recorded of the request a failed
/// completion belongs to, for `wc_error`.
struct tracked_request {
    /// The queue it was posted to.
    completion_side side = completion_side::unknown;
    /// Its `ibv_wr_opcode` for a send-queue request; -1 for a receive; -2 when not recorded.
    int opcode = -2;
    /// The remote virtual address of an RDMA WRITE, READ or atomic, else 0.
    std::uint64_t remote_address = 0;
    /// The rkey of an RDMA WRITE, READ or atomic, else 0.
    std::uint32_t rkey = 0;
};

/// A work completion with an error status (python-rdma's `WCError`). `code()` is the status in
/// `wc_category()`.
///
/// It reports only what a failed completion defines — `wr_id`, `status`, `qp_num`,
/// `vendor_err` — and what is known beside it: the queue when the caller knows it, and, for a
/// request of a `checked` QP, the operation, remote address and rkey that were posted. It never
/// reads the completion's opcode, length or flags, which are undefined when the status is not
/// success.
class wc_error : public error {
public:
    /// A failed completion of which nothing more is known (its side is `unknown`).
    /// @param wc  the failed completion; its defined fields are copied
    explicit wc_error(ibv_wc const& wc) : wc_error(wc, tracked_request{}) {}

    /// A failed completion whose queue the caller knows (e.g. a CQ that serves only receives).
    /// @param wc       the failed completion; its defined fields are copied
    /// @param is_send  true for a send-queue request, false for a receive-queue one
    wc_error(ibv_wc const& wc, bool is_send)
        : wc_error(wc, tracked_request{is_send ? completion_side::send : completion_side::receive, -2, 0, 0}) {}

    /// A failed completion of a tracked request (`checked`): `request` is what was recorded when
    /// it was posted.
    wc_error(ibv_wc const& wc, tracked_request const& request)
        : error(make_wc_error_code(wc.status), message(wc, request)), wr_id_(wc.wr_id), status_(wc.status),
          vendor_err_(wc.vendor_err), qp_num_(wc.qp_num), request_(request) {}

    /// The status of the completion.
    [[nodiscard]] ibv_wc_status status() const noexcept { return status_; }
    /// The provider's vendor error syndrome.
    [[nodiscard]] std::uint32_t vendor_err() const noexcept { return vendor_err_; }
    /// The `wr_id` of the failed request.
    [[nodiscard]] std::uint64_t wr_id() const noexcept { return wr_id_; }
    /// The QP number of the failed request.
    [[nodiscard]] std::uint32_t qp_num() const noexcept { return qp_num_; }
    /// The queue of the failed request: `unknown` unless tracking or the thrower knew it.
    [[nodiscard]] completion_side side() const noexcept { return request_.side; }
    /// What was recorded of the request when it was posted (its `side` is `unknown`, its
    /// `opcode` -2, when nothing was).
    [[nodiscard]] tracked_request const& request() const noexcept { return request_; }

protected:
    void dump_attributes(std::ostream& os, std::string const& lead) const override {
        os << lead << "status: " << ::ibv_wc_status_str(status_) << " (" << static_cast<int>(status_) << ")\n"
           << lead << "vendor_err: 0x" << detail::hex(vendor_err_) << '\n'
           << lead << "wr_id: " << wr_id_ << '\n'
           << lead << "qp_num: " << qp_num_ << '\n'
           << lead << "side: " << side_name(request_.side) << '\n';
        if (request_.opcode != -2) os << lead << "operation: " << detail::wr_opcode_name(request_.opcode) << '\n';
        if (detail::is_remote_opcode(request_.opcode))
            os << lead << "remote_address: 0x" << detail::hex(request_.remote_address) << '\n'
               << lead << "rkey: 0x" << detail::hex(request_.rkey) << '\n';
    }

private:
    static char const* side_name(completion_side side) noexcept {
        switch (side) {
        case completion_side::send:
            return "send";
        case completion_side::receive:
            return "receive";
        default:
            return "unknown (not tracked)";
        }
    }
    // "work completion for wr_id 7 on QP 17", then what is known: " (send queue)", and for a
    // tracked request ": RDMA WRITE to 0x7f…00 with rkey 0x1234".
    static std::string message(ibv_wc const& wc, tracked_request const& r) {
        std::string s = "work completion for wr_id " + std::to_string(wc.wr_id) + " on QP " + std::to_string(wc.qp_num);
        if (r.side == completion_side::send) s += " (send queue)";
        if (r.side == completion_side::receive) s += " (receive queue)";
        if (r.opcode != -2) s += ": " + detail::wr_opcode_name(r.opcode);
        if (detail::is_remote_opcode(r.opcode))
            s += " of remote address 0x" + detail::hex(r.remote_address) + " with rkey 0x" + detail::hex(r.rkey);
        return s;
    }

    std::uint64_t wr_id_;
    ibv_wc_status status_;
    std::uint32_t vendor_err_;
    std::uint32_t qp_num_;
    tracked_request request_;
};

/// An asynchronous error event the user asked to be raised (python-rdma's `AsyncError`): a QP,
/// CQ, SRQ or WQ gone to the error state, a device gone fatal. `code()` is the event type in
/// `async_category()`. The event itself has been acknowledged when this is thrown; the error
/// keeps what identifies the affected object.
/// @see ibv_get_async_event(3)
class async_error : public error {
public:
    /// @param type      the event type, e.g. IBV_EVENT_QP_ACCESS_ERR
    /// @param device    the device's name, e.g. "rxe0"
    /// @param affected  what it affects, for people: "QP 17", "CQ 0x55d0c8e0", "port 1", "device"
    /// @param qp_num    the QP number for a QP event, else 0
    /// @param port_num  the port for a port event, else 0
    async_error(ibv_event_type type, std::string device, std::string affected, std::uint32_t qp_num = 0,
                int port_num = 0)
        : error(make_async_error_code(type), std::string{"asynchronous event \""} + ::ibv_event_type_str(type) +
                                                 "\" on " + device + " for " + affected),
          type_(type), device_(std::move(device)), affected_(std::move(affected)), qp_num_(qp_num),
          port_num_(port_num) {}

    /// The event type.
    [[nodiscard]] ibv_event_type event_type() const noexcept { return type_; }
    /// The device's name.
    [[nodiscard]] std::string const& device() const noexcept { return device_; }
    /// What the event affects, as text ("QP 17", "port 1", …).
    [[nodiscard]] std::string const& affected() const noexcept { return affected_; }
    /// The QP number for a QP event, else 0.
    [[nodiscard]] std::uint32_t qp_num() const noexcept { return qp_num_; }
    /// The port number for a port event, else 0.
    [[nodiscard]] int port_num() const noexcept { return port_num_; }

protected:
    void dump_attributes(std::ostream& os, std::string const& lead) const override {
        os << lead << "event: " << ::ibv_event_type_str(type_) << " (" << static_cast<int>(type_) << ")\n"
           << lead << "device: " << device_ << '\n'
           << lead << "affected: " << affected_ << '\n';
        if (qp_num_ != 0) os << lead << "qp_num: " << qp_num_ << '\n';
        if (port_num_ != 0) os << lead << "port_num: " << port_num_ << '\n';
    }

private:
    ibv_event_type type_;
    std::string device_;
    std::string affected_;
    std::uint32_t qp_num_;
    int port_num_;
};

namespace detail {

/// Throws `sys_error` for a verb that failed with `err`.
[[noreturn]] RDMACXX_COLD inline void throw_sys(int err, char const* verb, std::string what = {}) {
    throw sys_error(err, verb, std::move(what));
}

/// True for the errno values that mean "the device or kernel does not have this" (EOPNOTSUPP,
/// which is ENOTSUP on Linux, ENOSYS, EPROTONOSUPPORT).
[[nodiscard]] constexpr bool means_not_supported(int err) noexcept {
    return err == EOPNOTSUPP || err == ENOSYS || err == EPROTONOSUPPORT;
}

/// How a verb's EINVAL is read by `throw_verb`.
enum class einval_means : bool {
    bad_argument,  ///< EINVAL is a bad argument (most verbs): `sys_error`
    not_supported, ///< the verb's manual says EINVAL is also "not supported": `not_supported_error`
};

/// Throws `not_supported_error` when `err` means the device does not have what was asked
/// (`means_not_supported`, or EINVAL for a verb whose manual says so), `sys_error` otherwise:
/// the one place errno values map to "not supported".
[[noreturn]] RDMACXX_COLD inline void throw_verb(int err, char const* verb, std::string what,
                                                 einval_means einval = einval_means::bad_argument) {
    if (means_not_supported(err) || (err == EINVAL && einval == einval_means::not_supported))
        throw not_supported_error(err, verb, std::move(what));
    throw sys_error(err, verb, std::move(what));
}

/// Throws `sys_error` for a verb that reported failure through errno (NULL + errno, -1 + errno),
/// with a fixed message (no allocation happens before errno is read). A zero errno (a provider
/// that forgot to set it) becomes EIO, so the error never reads "Success".
[[noreturn]] RDMACXX_COLD inline void throw_errno(char const* verb, char const* what = "") {
    int const err = errno;
    throw sys_error(err != 0 ? err : EIO, verb, what);
}

/// As above, with a message that `make_what()` builds after errno has been read (building it
/// may allocate, and so may change errno): `throw_errno("ibv_alloc_pd", [&] { return "on " + name; })`.
template <class F>
    requires std::is_invocable_r_v<std::string, F&>
[[noreturn]] RDMACXX_COLD void throw_errno(char const* verb, F make_what) {
    int const err = errno;
    throw sys_error(err != 0 ? err : EIO, verb, make_what());
}

/// A message built before the call may already have changed errno: refused at compile time.
template <class S>
    requires std::is_same_v<std::remove_cvref_t<S>, std::string>
void throw_errno(char const*, S&&) {
    static_assert(!std::is_same_v<S, S>, "rdmacxx: throw_errno reads errno itself; pass the message as a lambda, "
                                         "throw_errno(verb, [&] { return ...; }), so that it is built after errno "
                                         "is read");
}

/// Throws `sys_error` for ibv_poll_cq(3)'s negative return `n`. Its value is not an errno (mlx5
/// returns -2 for any failure, others -1 or a negated errno): the error is EIO, and the message
/// quotes the value.
[[noreturn]] RDMACXX_COLD inline void throw_poll_cq(int n) {
    throw sys_error(EIO, "ibv_poll_cq", "(it returned " + std::to_string(n) + ")");
}

/// The `std::error_code` of ibv_poll_cq(3)'s negative return: EIO, as `throw_poll_cq` throws.
[[nodiscard]] inline std::error_code poll_cq_error_code(int /*n*/) noexcept { return {EIO, std::system_category()}; }

/// Throws `argument_error` with `message`.
[[noreturn]] RDMACXX_COLD inline void throw_argument(std::string message) { throw argument_error(std::move(message)); }

} // namespace detail
} // namespace v0
} // namespace rdmacxx
