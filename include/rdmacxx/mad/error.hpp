#pragma once
/// @file
/// The MAD error family, below `rdmacxx::error` (python-rdma's `MADError` and its kin):
/// `mad::mad_error` (an RPC that failed: an error status, a malformed reply; level 2 of
/// `dump_detailed` prints the request and reply packets field by field and in hex),
/// `mad::mad_timeout_error` (no reply after the retries), `mad::mad_class_error` (a
/// class-specific status, named for the SA) and `mad::sa_path_not_found_error` (the SA has no
/// path record for the query).

#include "rdmacxx/error.hpp"
#include "rdmacxx/mad/packet.hpp"
#include "rdmacxx/mad/types.hpp"

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <system_error>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace mad {

/// The error category of MAD Status values: `value` is the reply's 16-bit Status field,
/// `message()` what it says (`status_text`), e.g. 0x000C → "the method/attribute combination is
/// not supported". Thread-safety: immutable, shared.
[[nodiscard]] inline std::error_category const& status_category() noexcept {
    struct category final : std::error_category {
        [[nodiscard]] char const* name() const noexcept override { return "rdmacxx.mad_status"; }
        [[nodiscard]] std::string message(int value) const override {
            return status_text(static_cast<std::uint16_t>(value));
        }
    };
    static category const instance;
    return instance;
}

/// Makes a `std::error_code` in `status_category()` from a MAD Status field.
[[nodiscard]] inline std::error_code make_status_error_code(std::uint16_t status) noexcept {
    return {static_cast<int>(status), status_category()};
}

/// A MAD RPC that failed (python-rdma's `MADError`): the reply carried an error status, or was
/// malformed, or the request could not be sent. Keeps copies of the request and, when one came,
/// the reply: level 2 of `dump_detailed` prints both, decoded field by field and in hex. Its
/// code is the reply's Status in `status_category()`, or an errno in `std::system_category()`
/// when there was no usable reply.
/// Thread-safety: as any exception object.
class mad_error : public rdmacxx::error {
public:
    /// @param code     the reply's Status (`make_status_error_code`) or an errno
    /// @param message  what failed, e.g. "RPC MAD_METHOD_GET(1) PerfMgt(4.1) PMPortCounters(18) to
    ///                 fe80::2 got error status 0xc"
    /// @param request  the MAD that was sent, if any
    /// @param reply    the MAD that came back, if any
    mad_error(std::error_code code, std::string message, std::optional<packet> request = std::nullopt,
              std::optional<packet> reply = std::nullopt)
        : rdmacxx::error(code, std::move(message)), request_(request), reply_(reply) {}

    /// The MAD that was sent, when there was one.
    [[nodiscard]] std::optional<packet> const& request() const noexcept { return request_; }
    /// The MAD that came back, when one did.
    [[nodiscard]] std::optional<packet> const& reply() const noexcept { return reply_; }
    /// The reply's Status, or 0 when no reply came.
    [[nodiscard]] std::uint16_t status() const { return reply_ ? reply_->header().status : std::uint16_t{0}; }

protected:
    void dump_attributes(std::ostream& os, std::string const& lead) const override {
        if (request_) {
            os << lead << "request:\n";
            print_packet(os, *request_, lead + "  ");
        } else {
            os << lead << "request: none\n";
        }
        if (reply_) {
            os << lead << "reply:\n";
            print_packet(os, *reply_, lead + "  ");
        } else {
            os << lead << "reply: none\n";
        }
    }

private:
    std::optional<packet> request_;
    std::optional<packet> reply_;
};

/// A MAD RPC that got no reply (python-rdma's `MADTimeoutError`): every try of `tries()` waited
/// `timeout()` and nothing matching the request's TransactionID came. Its code is ETIMEDOUT.
class mad_timeout_error : public mad_error {
public:
    /// @param message  what was asked of whom, e.g. "RPC MAD_METHOD_GET(1) … to fe80::2 (GID index 0)"
    /// @param request  the MAD that was sent
    /// @param timeout  how long each try waited
    /// @param tries    how many times it was sent (1 + retries)
    mad_timeout_error(std::string message, packet const& request, std::chrono::milliseconds timeout, unsigned tries)
        : mad_error(std::error_code{ETIMEDOUT, std::system_category()},
                    std::move(message) + " got no reply: " + std::to_string(tries) + " tries of " +
                        std::to_string(timeout.count()) + " ms",
                    request),
          timeout_(timeout), tries_(tries) {}

    /// How long each try waited for the reply.
    [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }
    /// How many times the request was sent.
    [[nodiscard]] unsigned tries() const noexcept { return tries_; }

private:
    std::chrono::milliseconds timeout_;
    unsigned tries_;
};

/// A reply whose Status carries a class-specific code, bits 8 … 15 (python-rdma's
/// `MADClassError`, "got class specific error 3"); for the SA the code is named, e.g.
/// "ERR_NO_RECORDS". Its code is the whole Status in `status_category()`.
class mad_class_error : public mad_error {
public:
    /// @param message  what was asked, e.g. "RPC MAD_METHOD_GET(1) SubnAdm(3.2) SAPathRecord(53)"
    /// @param request  the MAD that was sent
    /// @param reply    the reply with the class-specific status
    mad_class_error(std::string message, packet const& request, packet const& reply)
        : mad_error(make_status_error_code(reply.header().status), std::move(message) + " " + explain(reply), request,
                    reply) {}

    /// The class-specific code: bits 8 … 15 of the reply's Status (3 for the SA's ERR_NO_RECORDS).
    [[nodiscard]] std::uint8_t class_status() const { return static_cast<std::uint8_t>(status() >> 8); }

private:
    // "got class specific error 3: ERR_NO_RECORDS" for the SA, "got class specific error 3" else.
    static std::string explain(packet const& reply) {
        mad_header const h = reply.header();
        auto const code = static_cast<std::uint8_t>(h.status >> 8);
        std::string s = "got class specific error " + std::to_string(code);
        if (h.mgmt_class == mgmt_class::subn_adm) s += ": " + sa_status_name(code);
        return s;
    }
};

/// The SA answered a PathRecord query with ERR_NO_RECORDS: no path to the destination
/// (python-rdma's `SAPathNotFoundError`, a `MADClassError`).
class sa_path_not_found_error : public mad_class_error {
public:
    using mad_class_error::mad_class_error;
};

namespace detail {

/// Throws the error for a reply with a non-zero Status to `request`: `mad_error` for the common
/// bits (busy, redirect, an invalid field; "… got error status 0x000c"), else `sa_path_not_found_error` for the SA's
/// ERR_NO_RECORDS to a PathRecord query, else `mad_class_error`. `what` names the RPC.
[[noreturn]] RDMACXX_COLD inline void throw_status(std::string what, packet const& request, packet const& reply) {
    mad_header const h = reply.header();
    if ((h.status & 0x00ffU) != 0 || (h.status >> 8) == 0) {
        std::string hex = rdmacxx::detail::hex(h.status);
        hex.insert(0, 4 - hex.size(), '0');
        throw mad_error(make_status_error_code(h.status), std::move(what) + " got error status 0x" + hex, request,
                        reply);
    }
    if (h.mgmt_class == mgmt_class::subn_adm && (h.status >> 8) == sa_status::no_records &&
        h.attribute_id == attribute_id::path_record)
        throw sa_path_not_found_error(std::move(what), request, reply);
    throw mad_class_error(std::move(what), request, reply);
}

} // namespace detail
} // namespace mad
} // namespace v0
} // namespace rdmacxx
