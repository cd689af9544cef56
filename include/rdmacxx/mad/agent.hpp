#pragma once
/// @file
/// `mad::agent`: a MAD agent registered on a `mad::port` for one management class and version
/// (with an OUI for the vendor classes 0x30 … 0x4F; RMPP off). It is the requester side of an
/// RPC — `call`, `get`, `set`: send, match the reply by TransactionID, time out and retry
/// within a bound, return a typed result or throw a typed error (rdmacxx/mad/error.hpp) — and,
/// registered with methods to serve, the responder side: `receive` a request, `respond`.

#include "rdmacxx/detail/quirks.hpp"
#include "rdmacxx/detail/umad.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/mad/error.hpp"
#include "rdmacxx/mad/fields.hpp"
#include "rdmacxx/mad/packet.hpp"
#include "rdmacxx/mad/port.hpp"
#include "rdmacxx/mad/types.hpp"

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace mad {

/// The timeouts and retries of an RPC. The kernel resends the request after each `timeout`
/// without a reply, `retries` times; the call gives up after `(retries + 1) × timeout`, plus at
/// most `grace` for the kernel's own report to arrive.
struct rpc_options {
    std::chrono::milliseconds timeout{200}; ///< wait per try (1 ms … 60 s); umad_send(3)'s timeout_ms
    unsigned retries = 3;                   ///< resends after the first try (0 … 20)
    std::chrono::milliseconds grace{500};   ///< extra wait past the last try for the kernel's report

    /// The longest a call waits: `(retries + 1) × timeout + grace`.
    [[nodiscard]] constexpr std::chrono::milliseconds bound() const noexcept {
        return timeout * static_cast<long>(retries + 1) + grace;
    }
};

/// The reply to `request`: a copy of it (data included) with the R bit set on its method
/// (GetResp, 0x81, for a Get or a Set) and `status` in its Status field; the TransactionID is
/// the request's, as the kernel needs to match it.
[[nodiscard]] inline packet make_response(packet const& request, std::uint16_t status = 0) {
    packet reply = request;
    mad_header h = request.header();
    h.method = h.method == method::set ? method::get_resp : static_cast<std::uint8_t>(h.method | method::response);
    h.status = status;
    reply.set_header(h);
    return reply;
}

/// A MAD agent: one registration of a management class and version on a `mad::port`. Move-only
/// (a moved-from agent refuses to send or receive with `argument_error`); unregisters on
/// destruction. It shares the port's state, so it may outlive the `port` object.
/// Thread-safety: one thread at a time per port and its agents.
/// @see umad_register(3), umad_register_oui(3), umad_send(3), umad_recv(3)
class agent {
public:
    /// Registers an agent for `mgmt_class` and `class_version` that sends requests and receives
    /// their replies (no unsolicited MADs). For a vendor class of range 2 (0x30 … 0x4F) `oui`
    /// names the vendor (24 bits) and the class version must be 1 (umad_register_oui(3)).
    /// @throws argument_error for an SMP class (0x01, 0x81: QP0 is not for users), a vendor
    ///         class without an OUI, with an OUI over 24 bits or a class version other than 1; not_supported_error when
    ///         the kernel refuses the class (EPROTONOSUPPORT: a RoCE port has no QP0); sys_error otherwise.
    agent(port const& p, std::uint8_t mgmt_class, std::uint8_t class_version, std::uint32_t oui = 0)
        : agent(p, mgmt_class, class_version, oui, {}) {}

    /// Registers an agent that also serves the class: the kernel delivers it the requests whose
    /// method is in `methods` (e.g. `{method::get, method::set}`), to `receive` and `respond` to.
    /// @throws as the constructor above; argument_error for a method over 127 or a response method.
    [[nodiscard]] static agent responder(port const& p, std::uint8_t mgmt_class, std::uint8_t class_version,
                                         std::initializer_list<std::uint8_t> methods, std::uint32_t oui = 0) {
        return {p, mgmt_class, class_version, oui, methods};
    }

    agent(agent&& o) noexcept
        : state_(std::move(o.state_)), id_(std::exchange(o.id_, -1)), mgmt_class_(o.mgmt_class_),
          class_version_(o.class_version_), oui_(o.oui_) {}
    agent& operator=(agent&& o) noexcept {
        if (this != &o) {
            unregister();
            state_ = std::move(o.state_);
            id_ = std::exchange(o.id_, -1);
            mgmt_class_ = o.mgmt_class_;
            class_version_ = o.class_version_;
            oui_ = o.oui_;
        }
        return *this;
    }
    agent(agent const&) = delete;
    agent& operator=(agent const&) = delete;
    ~agent() { unregister(); }

    /// The kernel's agent id.
    [[nodiscard]] int id() const noexcept { return id_; }
    /// The management class.
    [[nodiscard]] std::uint8_t mgmt_class() const noexcept { return mgmt_class_; }
    /// The class version.
    [[nodiscard]] std::uint8_t class_version() const noexcept { return class_version_; }

    /// A request of this agent's class: the common header with `m`, `attribute_id` and
    /// `attribute_modifier` (the TransactionID is set by `call`), and the OUI for a vendor class.
    [[nodiscard]] packet make_request(std::uint8_t m, std::uint16_t attribute_id,
                                      std::uint32_t attribute_modifier = 0) const {
        packet p;
        mad_header h;
        h.mgmt_class = mgmt_class_;
        h.class_version = class_version_;
        h.method = m;
        h.attribute_id = attribute_id;
        h.attribute_modifier = attribute_modifier;
        p.set_header(h);
        if (is_vendor_oui_class(mgmt_class_)) p.set_oui(oui_);
        return p;
    }

    /// Sends `request` to `to` and waits for its reply: the RPC. Sets the request's
    /// TransactionID; the kernel resends it after each `options.timeout` without a reply,
    /// `options.retries` times, and matches the reply by TransactionID (and by GID in the GRH).
    /// Blocks for at most `options.bound()`.
    /// @returns the reply, whose Status is 0.
    /// @throws argument_error before anything is sent: a request of another class or version, a
    ///         response method, options out of range, a GID index the port lacks, an address
    ///         field too wide (QPN over 24 bits, flow label over 20, SL over 15);
    ///         mad_timeout_error (ETIMEDOUT) when no reply came after the retries, saying where
    ///         it was sent from and to; mad_error for a reply with an error status in its common
    ///         bits (e.g. 0x000C: no agent there serves the method and attribute), for a
    ///         malformed reply, or when umad_send(3) refuses (its errno; ETIMEDOUT when no
    ///         neighbour answers for the GID on RoCE);
    ///         mad_class_error for a class-specific status; sa_path_not_found_error for the SA's
    ///         ERR_NO_RECORDS to a PathRecord query; sys_error when umad_recv(3) fails.
    [[nodiscard]] packet call(packet request, address const& to, rpc_options const& options = {}) {
        mad_header h = request.header();
        check_call(h, options);
        gid_entry const from =
            to.gid_index ? detail::gid_at(*state_, *to.gid_index) : detail::source_gid_for(*state_, to.gid);
        h.transaction_id = state_->next_tid++;
        request.set_header(h);
        std::string const what = "RPC " + describe(h) + " to " + to.gid.to_string() + " from " +
                                 state_->where.to_string() + " GID index " + std::to_string(from.index) + " " +
                                 from.gid.to_string();
        send(request, to, from.index, options.timeout, options.retries, what);
        auto const deadline = std::chrono::steady_clock::now() + options.bound();
        auto const tid = static_cast<std::uint32_t>(h.transaction_id);
        while (auto got = receive_for(id_, deadline)) {
            mad_header const rh = got->mad.header();
            if (static_cast<std::uint32_t>(rh.transaction_id) != tid) continue; // a late reply to an earlier call
            if (got->kernel_status == ETIMEDOUT) throw timeout(what, to, from, request, options);
            if (got->kernel_status != 0)
                throw mad_error(std::error_code{got->kernel_status, std::system_category()},
                                what + ": the kernel reported an error for the request", request);
            if (got->length < mad_header::size || !rh.is_response())
                throw mad_error(std::make_error_code(std::errc::bad_message),
                                what + " got a malformed reply (" + std::to_string(got->length) + " bytes, " +
                                    method_name(rh.method) + ")",
                                request, got->mad);
            if (rh.status != 0) detail::throw_status(what, request, got->mad);
            return got->mad;
        }
        throw timeout(what, to, from, request, options);
    }

    /// Get(): asks `to` for attribute `A` (with `query` as the request's data, `attribute_modifier`
    /// in the header) and returns the reply's attribute.
    /// @throws as `call`.
    template <wire_layout A>
    [[nodiscard]] A get(address const& to, A const& query = {}, std::uint32_t attribute_modifier = 0,
                        rpc_options const& options = {}) {
        packet request = make_request(method::get, A::id, attribute_modifier);
        request.set_attribute(query);
        return call(request, to, options).template attribute<A>();
    }

    /// Set(): writes attribute `value` at `to` and returns the reply's attribute.
    /// @throws as `call`.
    template <wire_layout A>
    [[nodiscard]] A set(address const& to, A const& value, std::uint32_t attribute_modifier = 0,
                        rpc_options const& options = {}) {
        packet request = make_request(method::set, A::id, attribute_modifier);
        request.set_attribute(value);
        return call(request, to, options).template attribute<A>();
    }

    /// Waits up to `timeout` for a request to serve (an agent made by `responder`).
    /// @returns the request and its sender, or empty when none came in time.
    /// @throws sys_error when umad_recv(3) fails.
    [[nodiscard]] std::optional<received_mad> receive(std::chrono::milliseconds timeout) {
        check_live();
        auto const deadline = std::chrono::steady_clock::now() + timeout;
        while (auto got = receive_for(id_, deadline))
            if (!got->mad.header().is_response()) return got;
        return std::nullopt;
    }

    /// Sends `reply` (e.g. `make_response(request.mad)` with its attribute set) back to the sender
    /// of `request`: with a GRH to its GID from the local GID the request came in on when the
    /// request had a GRH (always on RoCE), else to its LID without one.
    /// @throws argument_error when `reply` is not a response to `request` (method, TransactionID);
    ///         mad_error when umad_send(3) refuses.
    void respond(received_mad const& request, packet const& reply) {
        check_live();
        mad_header const q = request.mad.header();
        mad_header const r = reply.header();
        if (!r.is_response() || r.transaction_id != q.transaction_id || r.mgmt_class != q.mgmt_class)
            throw argument_error("not a reply to " + describe(q) + ": " + describe(r) + " with TransactionID 0x" +
                                 rdmacxx::detail::hex(r.transaction_id));
        // With a GRH when the request had one (always on RoCE), from the GID it came in on.
        bool const grh = request.from.gid_index.has_value();
        send(reply, request.from, grh ? *request.from.gid_index : 0, std::chrono::milliseconds{0}, 0,
             "reply " + describe(r) + " to " + request.from.gid.to_string(), grh);
    }

private:
    agent(port const& p, std::uint8_t mgmt_class, std::uint8_t class_version, std::uint32_t oui,
          std::initializer_list<std::uint8_t> methods)
        : state_(p.state()), mgmt_class_(mgmt_class), class_version_(class_version), oui_(oui) {
        std::string const what =
            "for " + class_name(mgmt_class) + " version " + std::to_string(class_version) + " on " + p.to_string();
        if (mgmt_class == mgmt_class::subn_lid_routed || mgmt_class == mgmt_class::subn_directed_route)
            throw argument_error("cannot register an agent " + what + ": the subnet management classes use QP0");
        if (is_vendor_oui_class(mgmt_class) && (oui == 0 || oui > 0xffffffU))
            throw argument_error("an agent " + what + " needs an OUI of 24 bits, not 0x" + rdmacxx::detail::hex(oui));
        if (is_vendor_oui_class(mgmt_class) && class_version != 1)
            throw argument_error("cannot register an agent " + what +
                                 ": umad_register_oui(3) registers the vendor classes 0x30 to 0x4F at version 1");
        rdmacxx::detail::umad_method_mask mask;
        for (std::uint8_t const m : methods) {
            if (m >= 128 || (m & method::response) != 0)
                throw argument_error("an agent " + what + " cannot serve " + method_name(m));
            mask.set(m);
        }
        errno = 0;
        int rc = 0;
        char const* verb = "umad_register";
        if (is_vendor_oui_class(mgmt_class)) {
            verb = "umad_register_oui";
            std::uint8_t o[3] = {static_cast<std::uint8_t>(oui >> 16), static_cast<std::uint8_t>(oui >> 8),
                                 static_cast<std::uint8_t>(oui)};
            rc = ::umad_register_oui(state_->fd.get(), mgmt_class, 0, o, mask.words);
        } else {
            rc = ::umad_register(state_->fd.get(), mgmt_class, class_version, 0, mask.words);
        }
        if (rc < 0) rdmacxx::detail::throw_verb(rdmacxx::detail::umad_errno(rc, errno), verb, what);
        id_ = rc;
    }

    void unregister() noexcept {
        if (id_ >= 0 && state_) (void)::umad_unregister(state_->fd.get(), std::exchange(id_, -1));
    }

    void check_live() const {
        if (!state_ || id_ < 0) throw argument_error("a moved-from mad::agent cannot send or receive");
    }

    void check_call(mad_header const& h, rpc_options const& o) const {
        check_live();
        if (h.mgmt_class != mgmt_class_ || h.class_version != class_version_ || h.base_version != base_version)
            throw argument_error("an agent for " + class_name(mgmt_class_) + " version " +
                                 std::to_string(class_version_) + " cannot send " + describe(h) + " (BaseVersion " +
                                 std::to_string(h.base_version) + ")");
        if (h.is_response()) throw argument_error("an RPC sends a request, not " + method_name(h.method));
        if (o.timeout.count() < 1 || o.timeout.count() > 60000 || o.retries > 20 || o.grace.count() < 0)
            throw argument_error("RPC options out of range: timeout " + std::to_string(o.timeout.count()) +
                                 " ms (1 to 60000), retries " + std::to_string(o.retries) + " (0 to 20), grace " +
                                 std::to_string(o.grace.count()) + " ms");
    }

    void send(packet const& mad, address const& to, std::uint32_t gid_index, std::chrono::milliseconds timeout,
              unsigned retries, std::string const& what, bool grh = true) {
        if (to.qpn > 0xffffffU || to.flow_label > 0xfffffU || to.sl > 15 || gid_index > 255)
            throw argument_error("cannot send the " + what + ": QPN " + std::to_string(to.qpn) +
                                 " (24 bits), flow label " + std::to_string(to.flow_label) + " (20 bits), SL " +
                                 std::to_string(to.sl) + " (0 to 15), GID index " + std::to_string(gid_index) +
                                 " (0 to 255)");
        detail::umad_buffer buf;
        std::memcpy(buf.mad(), mad.bytes().data(), mad_size);
        detail::set_address(buf, to, gid_index, grh);
        errno = 0;
        int const rc = ::umad_send(state_->fd.get(), id_, buf.get(), static_cast<int>(mad_size),
                                   static_cast<int>(timeout.count()), static_cast<int>(retries));
        if (rc < 0) {
            int const err = rdmacxx::detail::umad_errno(rc, errno);
            std::string msg = "umad_send refused the " + what;
            if (err == ETIMEDOUT || err == EHOSTUNREACH)
                msg += " (the kernel found no link-layer address for the GID: no neighbour answered)";
            throw mad_error(std::error_code{err, std::system_category()}, std::move(msg), mad);
        }
    }

    // The next MAD for agent `id` (first from the backlog), or empty at `deadline`; MADs for the
    // port's other agents go to the backlog.
    std::optional<received_mad> receive_for(int id, std::chrono::steady_clock::time_point deadline) {
        auto& backlog = state_->backlog;
        for (auto it = backlog.begin(); it != backlog.end(); ++it)
            if (static_cast<int>(it->agent_id) == id) {
                received_mad got = *it;
                backlog.erase(it);
                return got;
            }
        detail::umad_buffer buf;
        for (;;) {
            auto const left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return std::nullopt;
            int length = static_cast<int>(mad_size);
            errno = 0;
            int const rc = ::umad_recv(state_->fd.get(), buf.get(), &length, static_cast<int>(left.count()));
            if (rc == -ETIMEDOUT) return std::nullopt;
            if (rc == -EWOULDBLOCK || rc == -EINTR) continue;
            if (rc < 0) rdmacxx::detail::throw_sys(rdmacxx::detail::umad_errno(rc, errno), "umad_recv");
            received_mad got;
            auto const n = static_cast<std::size_t>(length < 0 ? 0 : length);
            got.length = n < mad_size ? n : mad_size;
            std::memcpy(got.mad.bytes().data(), buf.mad(), got.length);
            got.from = detail::address_of(*buf.addr());
            got.kernel_status = ::umad_status(buf.get());
            got.agent_id = static_cast<std::uint32_t>(rc);
            if (rc == id) return got;
            if (backlog.size() < 64) backlog.push_back(got);
        }
    }

    mad_timeout_error timeout(std::string const& what, address const& to, gid_entry const& from, packet const& request,
                              rpc_options const& o) const {
        std::string msg = what;
        if (from.gid.is_ipv4_mapped() || to.gid.is_ipv4_mapped())
            msg += std::string{" ("} + rdmacxx::detail::quirks::mad_ipv4_reply_dropped + ")";
        return {std::move(msg), request, o.timeout, o.retries + 1};
    }

    std::shared_ptr<detail::mad_port_state> state_;
    int id_ = -1;
    std::uint8_t mgmt_class_;
    std::uint8_t class_version_;
    std::uint32_t oui_;
};

} // namespace mad
} // namespace v0
} // namespace rdmacxx
