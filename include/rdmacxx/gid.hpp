#pragma once
/// @file
/// `gid` and `guid` value types: parse, format, compare, hash.

#include "rdmacxx/error.hpp"

#include <arpa/inet.h>
#include <endian.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory> // std::hash (declared here too; <functional> would bring <unordered_map>)
#include <ostream>
#include <string>
#include <string_view>

namespace rdmacxx {
inline namespace v0 {

/// A 128-bit Global Identifier (GID) of a port, in network byte order, as `ibv_gid` holds it.
///
/// Text form: IPv6 (RFC 4291/5952), e.g. `fe80::2:c903:0:1492` or, for RoCE v2 over IPv4,
/// `::ffff:198.18.0.1`. Trivially copyable, 16 bytes, totally ordered by its bytes, hashable.
/// @see ibv_query_gid(3)
class gid {
public:
    /// The all-zero GID (`::`), which is also what an unused GID table entry holds.
    constexpr gid() noexcept = default;
    /// The GID whose 16 bytes, network order, are `bytes`.
    explicit constexpr gid(std::array<std::uint8_t, 16> const& bytes) noexcept : bytes_(bytes) {}
    /// The GID held by a verbs `ibv_gid`.
    explicit gid(ibv_gid const& raw) noexcept { std::memcpy(bytes_.data(), raw.raw, 16); }

    /// Parses the IPv6 text form. IPv4 text alone (`198.18.0.1`) is refused: write it as
    /// `::ffff:198.18.0.1`. All of `text` is read: an embedded NUL character is refused, not an
    /// end of the text.
    /// @throws argument_error quoting `text` and saying what is wrong.
    [[nodiscard]] static gid parse(std::string_view text) {
        gid g;
        if (auto const why = g.try_parse(text); why != nullptr) [[unlikely]]
            detail::throw_argument("cannot parse GID " + detail::quoted(text) + ": " + why);
        return g;
    }

    /// Parses like `parse` without throwing; returns false on malformed text and leaves `out`
    /// as it was.
    [[nodiscard]] static bool try_parse(std::string_view text, gid& out) noexcept {
        gid g;
        if (g.try_parse(text) != nullptr) return false;
        out = g;
        return true;
    }

    /// The canonical IPv6 text (RFC 5952, as inet_ntop(3) writes it), e.g. `fe80::2:c903:0:1492`.
    [[nodiscard]] std::string to_string() const {
        char buf[INET6_ADDRSTRLEN] = {};
        ::inet_ntop(AF_INET6, bytes_.data(), buf, sizeof buf);
        return buf;
    }

    /// The 16 bytes, network order.
    [[nodiscard]] constexpr std::array<std::uint8_t, 16> const& bytes() const noexcept { return bytes_; }
    /// The value as a verbs `ibv_gid`.
    [[nodiscard]] ibv_gid native() const noexcept {
        ibv_gid raw{};
        std::memcpy(raw.raw, bytes_.data(), 16);
        return raw;
    }
    /// The subnet prefix (high 64 bits), host order.
    [[nodiscard]] constexpr std::uint64_t subnet_prefix() const noexcept { return load64(0); }
    /// The interface ID (low 64 bits), host order; for an IB port GID this is the port GUID.
    [[nodiscard]] constexpr std::uint64_t interface_id() const noexcept { return load64(8); }
    /// True for `::`, the value of an empty GID table entry.
    [[nodiscard]] constexpr bool is_zero() const noexcept {
        return std::all_of(bytes_.begin(), bytes_.end(), [](std::uint8_t b) { return b == 0; });
    }
    /// True for an IPv4-mapped GID (`::ffff:a.b.c.d`), the form of a RoCE v2 GID over IPv4.
    [[nodiscard]] constexpr bool is_ipv4_mapped() const noexcept {
        for (std::size_t i = 0; i < 10; ++i)
            if (bytes_[i] != 0) return false;
        return bytes_[10] == 0xff && bytes_[11] == 0xff;
    }
    /// True for a link-local GID (fe80::/10).
    [[nodiscard]] constexpr bool is_link_local() const noexcept {
        return bytes_[0] == 0xfe && (bytes_[1] & 0xc0) == 0x80;
    }

    friend constexpr bool operator==(gid const&, gid const&) noexcept = default;
    friend constexpr auto operator<=>(gid const&, gid const&) noexcept = default;
    /// Writes `to_string()`.
    friend std::ostream& operator<<(std::ostream& os, gid const& g) { return os << g.to_string(); }

private:
    [[nodiscard]] constexpr std::uint64_t load64(std::size_t at) const noexcept {
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < 8; ++i)
            v = (v << 8) | bytes_[at + i];
        return v;
    }

    // Returns nullptr on success, else what is wrong with the text.
    char const* try_parse(std::string_view text) noexcept {
        if (text.empty()) return "the text is empty";
        if (text.find('\0') != std::string_view::npos) return "the text holds a NUL character";
        if (text.size() >= INET6_ADDRSTRLEN) return "too long for an IPv6 address";
        if (text.find(':') == std::string_view::npos)
            return "not an IPv6 address (a GID is written like fe80::1 or ::ffff:192.0.2.1)";
        char buf[INET6_ADDRSTRLEN] = {};
        std::memcpy(buf, text.data(), text.size());
        if (::inet_pton(AF_INET6, buf, bytes_.data()) != 1) return "not a valid IPv6 address";
        return nullptr;
    }

    std::array<std::uint8_t, 16> bytes_{};
};

/// A 64-bit Globally Unique Identifier (GUID) of a node or port, held in host order.
///
/// Text forms: `0x0002c90300001492` (hex with `0x`, up to 16 digits) and `0002:c903:0000:1492`
/// (four groups of up to four hex digits, as ibstat prints). Formats as the second form.
/// @see ibv_get_device_guid(3)
class guid {
public:
    /// GUID zero.
    constexpr guid() noexcept = default;
    /// The GUID whose host-order value is `value`.
    explicit constexpr guid(std::uint64_t value) noexcept : value_(value) {}
    /// The GUID held in network byte order, as ibv_get_device_guid(3) returns it.
    [[nodiscard]] static guid from_network(__be64 raw) noexcept { return guid{be64toh(raw)}; }

    /// Parses either text form.
    /// @throws argument_error quoting `text` and saying what is wrong.
    [[nodiscard]] static guid parse(std::string_view text) {
        guid g;
        if (auto const why = g.try_parse(text); why != nullptr) [[unlikely]]
            detail::throw_argument("cannot parse GUID " + detail::quoted(text) + ": " + why);
        return g;
    }

    /// Parses like `parse` without throwing; returns false on malformed text.
    [[nodiscard]] static bool try_parse(std::string_view text, guid& out) noexcept {
        guid g;
        if (g.try_parse(text) != nullptr) return false;
        out = g;
        return true;
    }

    /// The host-order value.
    [[nodiscard]] constexpr std::uint64_t value() const noexcept { return value_; }
    /// `xxxx:xxxx:xxxx:xxxx`, lower-case hex, zero-padded.
    [[nodiscard]] std::string to_string() const {
        static constexpr char digits[] = "0123456789abcdef";
        std::string s(19, ':');
        for (std::size_t i = 0, pos = 0; i < 16; ++i, ++pos) {
            if (i != 0 && i % 4 == 0) ++pos;
            s[pos] = digits[(value_ >> (60 - 4 * i)) & 0xf];
        }
        return s;
    }

    friend constexpr bool operator==(guid, guid) noexcept = default;
    friend constexpr auto operator<=>(guid, guid) noexcept = default;
    /// Writes `to_string()`.
    friend std::ostream& operator<<(std::ostream& os, guid g) { return os << g.to_string(); }

private:
    static char const* parse_hex(std::string_view digits, std::size_t max_digits, std::uint64_t& out) noexcept {
        if (digits.empty()) return "an empty group of hex digits";
        if (digits.size() > max_digits) return "too many hex digits";
        for (char c : digits)
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return "not a hex digit";
        auto const [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out, 16);
        if (ec != std::errc{} || ptr != digits.data() + digits.size()) return "not a hex number";
        return nullptr;
    }

    char const* try_parse(std::string_view text) noexcept {
        if (text.empty()) return "the text is empty";
        if (text.find('\0') != std::string_view::npos) return "the text holds a NUL character";
        if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X'))
            return parse_hex(text.substr(2), 16, value_);
        if (text.find(':') == std::string_view::npos)
            return "expected 0x followed by up to 16 hex digits, or four groups like 0002:c903:0000:1492";
        std::uint64_t v = 0;
        for (int group = 0; group < 4; ++group) {
            auto const colon = text.find(':');
            if ((colon == std::string_view::npos) != (group == 3))
                return "expected exactly four colon-separated groups";
            std::uint64_t part = 0;
            if (auto why = parse_hex(text.substr(0, colon), 4, part)) return why;
            v = (v << 16) | part;
            text = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
        }
        value_ = v;
        return nullptr;
    }

    std::uint64_t value_ = 0;
};

} // namespace v0
} // namespace rdmacxx

/// @cond RDMACXX_STD_SPECIALIZATIONS
/// Hash of a GID, for unordered containers.
template <>
struct std::hash<rdmacxx::gid> {
    std::size_t operator()(rdmacxx::gid const& g) const noexcept {
        return std::hash<std::uint64_t>{}(g.subnet_prefix() * 0x9e3779b97f4a7c15ULL ^ g.interface_id());
    }
};

/// Hash of a GUID, for unordered containers.
template <>
struct std::hash<rdmacxx::guid> {
    std::size_t operator()(rdmacxx::guid g) const noexcept { return std::hash<std::uint64_t>{}(g.value()); }
};
/// @endcond
