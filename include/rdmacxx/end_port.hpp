#pragma once
/// @file
/// End ports: `end_port` (one port of an open device with the GID its connections use), the
/// end-port description grammar of python-rdma (`end_port_description`), and `get_end_port`,
/// which resolves a description to an opened device and port (`opened_end_port`).

#include "rdmacxx/context.hpp"
#include "rdmacxx/detail/address_vector.hpp"
#include "rdmacxx/device.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"

#include <charconv>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

/// A port of an open device and the GID table entry connections from it use, with the port's
/// attributes as they were when it was made. Queue pairs take it to move to INIT and RTR.
/// Finds its `context` through the context's cell: it follows the context when that moves
/// (`context()` names it wherever it is now), and `context()` throws `orphaned_error` once the
/// context is gone (see docs/ownership.md); it owns nothing on the device.
/// Thread-safety: immutable after construction.
class end_port {
public:
    /// Port `port_num` (1-based) of `ctx`, with the GID at `gid_index`, or when `gid_index` is
    /// negative the one `context::select_gid` picks (RoCE v2 and routable first).
    /// @throws sys_error when the port or GID cannot be queried (e.g. no such port);
    ///         argument_error when the port has no usable GID or `gid_index` is empty.
    end_port(rdmacxx::context& ctx, std::uint8_t port_num = 1, int gid_index = -1)
        : end_port(ctx, port_num, index_selector(gid_index)) {}

    /// Port `port_num` (1-based) of `ctx`, with the GID `want` selects (see `gid_selector`).
    /// @throws sys_error when the port cannot be queried (e.g. no such port); argument_error
    ///         naming the port and listing its GIDs when none fits `want`.
    end_port(rdmacxx::context& ctx, std::uint8_t port_num, gid_selector const& want)
        : context_(ctx.anchor_cell()), port_num_(port_num), attributes_(ctx.query_port(port_num)),
          gid_(ctx.select_gid(port_num, want)) {}

    /// The open device, wherever it has moved to.
    /// @throws orphaned_error when the context was destroyed.
    [[nodiscard]] rdmacxx::context& context() const { return context_.get("end port", "context"); }
    /// The 1-based port number.
    [[nodiscard]] std::uint8_t port_num() const noexcept { return port_num_; }
    /// The port's attributes when this end port was made.
    [[nodiscard]] port_attributes const& attributes() const noexcept { return attributes_; }
    /// The GID table entry connections use.
    [[nodiscard]] gid_entry const& gid() const noexcept { return gid_; }
    /// The port's LID (0 on RoCE).
    [[nodiscard]] std::uint16_t lid() const noexcept { return attributes_.lid(); }
    /// "device/port", e.g. "rxe0/1".
    [[nodiscard]] std::string to_string() const {
        return std::string{context().name()} + "/" + std::to_string(port_num_);
    }
    /// "rxe0/1 GID [1] ::ffff:198.18.0.1 RoCE v2 eth0": the port and the GID it uses, for
    /// messages (route errors name the chosen GID with it).
    [[nodiscard]] std::string describe() const { return to_string() + " GID " + gid_.to_string(); }

private:
    static gid_selector index_selector(int gid_index) noexcept {
        gid_selector s;
        if (gid_index >= 0) s.index = static_cast<std::uint32_t>(gid_index);
        return s;
    }

    detail::link<rdmacxx::context> context_; // the context's stable cell: valid when the context moves
    std::uint8_t port_num_;
    port_attributes attributes_;
    gid_entry gid_;
};

/// A parsed end-port description, python-rdma's grammar:
///
/// | form        | example               | means                                          |
/// |-------------|-----------------------|------------------------------------------------|
/// | empty       | ``                    | the first active port of the first device      |
/// | device      | `mlx5_0`              | the device's first active port (else port 1)   |
/// | device/port | `mlx5_0/1`            | that port (1 … 255, decimal)                   |
/// | port GID    | `fe80::2:c903:0:1492` | the port whose GID table holds it, and that GID|
/// | port GUID   | `0002:c903:0000:1492` or `0x0002c90300001492` | the port with that GUID |
///
/// A device name is 1 to 63 characters from `A-Z a-z 0-9 _ - .`. Text with a colon is a GID
/// when it is valid IPv6 text, else a GUID; text starting with `0x` is a GUID. All of the text
/// is read: an embedded NUL character is refused, not taken for its end. Parsing needs no
/// device. A value type. Thread-safety: immutable.
class end_port_description {
public:
    /// Which of the forms the text was.
    enum class form {
        any,         ///< empty: the first active port
        device,      ///< "dev"
        device_port, ///< "dev/port"
        gid,         ///< a port GID
        guid,        ///< a port (or node) GUID
    };

    /// Parses `text`.
    /// @throws argument_error quoting the text and saying what is wrong (an empty device name,
    ///         port 0, a port over 255, a bad character, text that is neither GID nor GUID, …).
    [[nodiscard]] static end_port_description parse(std::string_view text) {
        end_port_description d;
        d.text_ = text;
        if (std::string const why = d.parse_into(text); !why.empty()) [[unlikely]]
            detail::throw_argument("invalid end port description " + detail::quoted(text) + ": " + why);
        return d;
    }

    /// Parses like `parse` without throwing; returns false (and leaves `out` alone) on bad text.
    [[nodiscard]] static bool try_parse(std::string_view text, end_port_description& out) {
        end_port_description d;
        d.text_ = text;
        if (!d.parse_into(text).empty()) return false;
        out = std::move(d);
        return true;
    }

    /// Which form the text was.
    [[nodiscard]] form kind() const noexcept { return form_; }
    /// The device name (forms `device` and `device_port`), else empty.
    [[nodiscard]] std::string const& device_name() const noexcept { return device_; }
    /// The port number (form `device_port`), else 0.
    [[nodiscard]] std::uint8_t port_num() const noexcept { return port_; }
    /// The GID (form `gid`), else `::`.
    [[nodiscard]] rdmacxx::gid const& gid() const noexcept { return gid_; }
    /// The GUID (form `guid`), else 0.
    [[nodiscard]] rdmacxx::guid guid() const noexcept { return guid_; }
    /// The text as it was given.
    [[nodiscard]] std::string const& text() const noexcept { return text_; }

private:
    // Returns an empty string on success, else what is wrong.
    std::string parse_into(std::string_view text) {
        if (text.empty()) {
            form_ = form::any;
            return {};
        }
        if (auto const nul = text.find('\0'); nul != std::string_view::npos)
            return "the text holds a NUL character at offset " + std::to_string(nul);
        if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
            form_ = form::guid;
            if (!rdmacxx::guid::try_parse(text, guid_))
                return "not a GUID (expected 0x and 1 to 16 hex digits, like 0x0002c90300001492)";
            return {};
        }
        if (text.find(':') != std::string_view::npos) {
            if (rdmacxx::gid::try_parse(text, gid_)) {
                form_ = form::gid;
                return {};
            }
            if (rdmacxx::guid::try_parse(text, guid_)) {
                form_ = form::guid;
                return {};
            }
            return "neither a GID (IPv6 text like fe80::2:c903:0:1492) nor a GUID (four groups like "
                   "0002:c903:0000:1492)";
        }
        auto const slash = text.find('/');
        std::string_view const dev = text.substr(0, slash);
        if (auto why = check_device_name(dev); !why.empty()) return why;
        device_ = dev;
        if (slash == std::string_view::npos) {
            form_ = form::device;
            return {};
        }
        std::string_view const port = text.substr(slash + 1);
        if (port.empty()) return "the port number after '/' is missing";
        for (char c : port)
            if (c < '0' || c > '9') return "the port number \"" + std::string{port} + "\" is not a decimal number";
        unsigned value = 0;
        auto const [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
        if (ec != std::errc{} || ptr != port.data() + port.size() || value > 255)
            return "port " + std::string{port} + " is out of range (ports are numbered 1 to 255)";
        if (value == 0) return "port 0 does not exist (ports are numbered from 1)";
        port_ = static_cast<std::uint8_t>(value);
        form_ = form::device_port;
        return {};
    }

    static std::string check_device_name(std::string_view dev) {
        if (dev.empty()) return "the device name is empty";
        if (dev.size() > 63) return "the device name is longer than 63 characters";
        if (dev == "." || dev == "..") return std::string{"\""}.append(dev).append("\" is not a device name");
        for (char c : dev) {
            bool const ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                            c == '-' || c == '.';
            if (!ok) return std::string{"the device name has the character '"} + c + "' (allowed: A-Z a-z 0-9 _ - .)";
        }
        return {};
    }

    form form_ = form::any;
    std::string device_;
    std::uint8_t port_ = 0;
    rdmacxx::gid gid_;
    rdmacxx::guid guid_;
    std::string text_;
};

/// An opened device and one of its ports: what `get_end_port` returns. Owns the `context` and
/// converts to `end_port const&`, so it can be passed wherever an `end_port` is taken. Move-only:
/// the `end_port` inside follows the context through its cell when this object moves (see
/// docs/ownership.md). Thread-safety: as `context` and `end_port`.
class opened_end_port {
public:
    /// Takes an opened context and builds the end port `port_num` on it with the GID `want`
    /// selects.
    /// @throws as `end_port`'s constructor.
    opened_end_port(rdmacxx::context ctx, std::uint8_t port_num, gid_selector const& want = {})
        : context_(std::move(ctx)), port_(context_, port_num, want) {}

    /// The open device.
    [[nodiscard]] rdmacxx::context& context() const noexcept { return context_; }
    /// The port and its chosen GID.
    [[nodiscard]] end_port const& port() const noexcept { return port_; }
    /// The port and its chosen GID.
    operator end_port const&() const noexcept { return port_; } // NOLINT(google-explicit-constructor)
    /// The 1-based port number.
    [[nodiscard]] std::uint8_t port_num() const noexcept { return port_.port_num(); }
    /// The GID table entry connections use.
    [[nodiscard]] gid_entry const& gid() const noexcept { return port_.gid(); }
    /// The port's attributes when it was resolved.
    [[nodiscard]] port_attributes const& attributes() const noexcept { return port_.attributes(); }
    /// "device/port", e.g. "rxe0/1".
    [[nodiscard]] std::string to_string() const { return port_.to_string(); }

private:
    // Mutable: an end port hands out its device to make resources on, const or not (as the
    // `end_port` inside does, and as this did when it held the context on the heap).
    mutable rdmacxx::context context_;
    end_port port_; // follows context_ through its cell
};

namespace detail {

/// The local end of an address vector (detail/address_vector.hpp) that starts at `port`.
[[nodiscard]] inline local_end local_end_of(end_port const& port) noexcept {
    return {.port_num = port.port_num(),
            .sgid_index = static_cast<std::uint8_t>(port.gid().index),
            .is_ethernet = port.attributes().is_ethernet()};
}

/// The first active port of `ctx`, or 0 when none is active.
inline std::uint8_t first_active_port(context const& ctx) {
    std::uint8_t const n = ctx.port_count();
    for (unsigned p = 1; p <= n; ++p)
        if (ctx.query_port(static_cast<std::uint8_t>(p)).active()) return static_cast<std::uint8_t>(p);
    return 0;
}

/// "rxe0/1 ACTIVE, mlx5_0/1 DOWN" for error messages, or "this host has no RDMA device".
inline std::string describe_ports(device_list const& devices) {
    if (devices.empty()) return "this host has no RDMA device";
    std::string s = "ports:";
    for (device d : devices) {
        try {
            context const ctx = d.open();
            std::uint8_t const n = ctx.port_count();
            for (unsigned p = 1; p <= n; ++p)
                s.append(" ")
                    .append(d.name())
                    .append("/")
                    .append(std::to_string(p))
                    .append(" ")
                    .append(ctx.query_port(static_cast<std::uint8_t>(p)).state_name())
                    .append(",");
        } catch (error const&) {
            s.append(" ").append(d.name()).append(" (cannot be opened),");
        }
    }
    s.pop_back();
    return s;
}

[[noreturn]] RDMACXX_COLD inline void throw_no_end_port(end_port_description const& d, std::string const& what_exists) {
    throw argument_error("no end port \"" + d.text() + "\" on this host (" + what_exists + ")",
                         std::errc::no_such_device);
}

} // namespace detail

/// Resolves an end-port description (see `end_port_description` for the grammar) against the
/// host's devices, opens the device and returns it with the port. The GID is the one `want`
/// selects, except for the GID form, which uses the GID it names (unless `want.index` says
/// otherwise). A GUID matches a port GUID (the interface ID of the port's GID at index 0) or,
/// failing that, a device's node GUID, which means that device's first active port.
/// @throws argument_error (std::errc::invalid_argument) quoting malformed text;
///         argument_error (std::errc::no_such_device) naming what was asked and listing what
///         exists when nothing matches (the devices, their ports and states, or their GIDs);
///         sys_error when a device cannot be opened or queried.
/// Thread-safety: safe to call from several threads.
/// @see ibv_get_device_list(3), ibv_open_device(3), ibv_query_port(3), ibv_query_gid_ex(3)
[[nodiscard]] inline opened_end_port get_end_port(end_port_description const& d, gid_selector const& want = {}) {
    device_list const devices;
    using form = end_port_description::form;
    switch (d.kind()) {
    case form::any: {
        for (device dev : devices) {
            context ctx = dev.open();
            if (std::uint8_t const p = detail::first_active_port(ctx); p != 0)
                return opened_end_port{std::move(ctx), p, want};
        }
        throw argument_error("no active RDMA port on this host (" + detail::describe_ports(devices) + ")",
                             std::errc::no_such_device);
    }
    case form::device:
    case form::device_port: {
        device dev{nullptr};
        bool found = false;
        for (device x : devices)
            if (x.name() == d.device_name()) {
                dev = x;
                found = true;
            }
        if (!found) detail::throw_no_end_port(d, devices.describe());
        context ctx = dev.open();
        std::uint8_t const count = ctx.port_count();
        if (d.kind() == form::device) {
            std::uint8_t const p = detail::first_active_port(ctx);
            return opened_end_port{std::move(ctx), p != 0 ? p : std::uint8_t{1}, want};
        }
        if (d.port_num() > count)
            detail::throw_no_end_port(d, "device " + d.device_name() + " has " + std::to_string(count) +
                                             (count == 1 ? " port, " + d.device_name() + "/1"
                                                         : " ports, " + d.device_name() + "/1 to " + d.device_name() +
                                                               "/" + std::to_string(count)));
        return opened_end_port{std::move(ctx), d.port_num(), want};
    }
    case form::gid: {
        std::string have;
        for (device dev : devices) {
            context ctx = dev.open();
            std::uint8_t const n = ctx.port_count();
            for (unsigned p = 1; p <= n; ++p) {
                auto const port = static_cast<std::uint8_t>(p);
                for (auto const& e : ctx.gid_table(port)) {
                    if (e.gid == d.gid()) {
                        gid_selector sel = want;
                        if (!sel.index) sel.address = d.gid();
                        return opened_end_port{std::move(ctx), port, sel};
                    }
                    have += " " + std::string{dev.name()} + "/" + std::to_string(p) + " " + e.to_string() + ";";
                }
            }
        }
        if (have.empty()) detail::throw_no_end_port(d, devices.empty() ? devices.describe() : "no port has a GID");
        have.pop_back();
        detail::throw_no_end_port(d, "GIDs:" + have);
    }
    case form::guid: {
        std::string have;
        for (device dev : devices) {
            context ctx = dev.open();
            std::uint8_t const n = ctx.port_count();
            have += " " + std::string{dev.name()} + " node " + dev.guid().to_string() + ";";
            for (unsigned p = 1; p <= n; ++p) {
                auto const port = static_cast<std::uint8_t>(p);
                rdmacxx::guid const port_guid{ctx.query_gid(port, 0).interface_id()};
                if (port_guid == d.guid()) return opened_end_port{std::move(ctx), port, want};
                have +=
                    " " + std::string{dev.name()} + "/" + std::to_string(p) + " port " + port_guid.to_string() + ";";
            }
        }
        for (device dev : devices)
            if (dev.guid() == d.guid()) {
                context ctx = dev.open();
                std::uint8_t const p = detail::first_active_port(ctx);
                return opened_end_port{std::move(ctx), p != 0 ? p : std::uint8_t{1}, want};
            }
        if (have.empty()) detail::throw_no_end_port(d, devices.describe());
        have.pop_back();
        detail::throw_no_end_port(d, "GUIDs:" + have);
    }
    }
    detail::throw_no_end_port(d, devices.describe());
}

/// Parses `description` and resolves it: `get_end_port("rxe0/1")`, `get_end_port("")` for the
/// first active port, `get_end_port("::ffff:198.18.0.1")`, `get_end_port("0x0002c90300001492")`.
/// The resolved object converts to `end_port const&`:
/// `auto where = rdmacxx::get_end_port(argv[1]); qp.connect(where, remote);`
/// @throws as `end_port_description::parse` and the overload above.
[[nodiscard]] inline opened_end_port get_end_port(std::string_view description = {}, gid_selector const& want = {}) {
    return get_end_port(end_port_description::parse(description), want);
}

} // namespace v0
} // namespace rdmacxx
