#pragma once
/// @file
/// The wire layout of MAD attributes: big-endian bit fields as the InfiniBand specification's
/// tables give them (a bit offset from the most significant bit of the first byte, and a width
/// in bits), and the generic `encode`, `decode` and `print` over any type that lists its fields
/// (`mad::wire_layout`). The typed headers and attributes are in rdmacxx/mad/attributes.hpp.

#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace rdmacxx {
inline namespace v0 {
namespace mad {

/// How `print` shows a field's value: decimal (counts, versions, small codes) or hexadecimal
/// with `0x` (identifiers, masks, keys).
enum class show : std::uint8_t {
    dec, ///< decimal
    hex, ///< `0x` and lower-case hex digits
};

/// A type with a fixed wire layout: `name` (the attribute's name in the specification, e.g.
/// "PathRecord"), `size` (its length in bytes) and a static `for_each_field(self, f)` that calls
/// `f(name, bit_offset, bit_width, member, show)` for every field in wire order, reserved ones
/// included. Members are unsigned integers of at least `bit_width` bits, or `rdmacxx::gid` for a
/// 128-bit field.
template <class T>
concept wire_layout = std::is_default_constructible_v<T> && requires {
    { T::name } -> std::convertible_to<std::string_view>;
    { T::size } -> std::convertible_to<std::size_t>;
};

namespace detail {

/// Reads `width` (1 … 64) bits at big-endian bit offset `offset` of `in`. The caller has
/// checked that `in` holds them.
[[nodiscard]] constexpr std::uint64_t get_bits(std::span<std::byte const> in, std::size_t offset,
                                               std::size_t width) noexcept {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < width; ++i) {
        std::size_t const bit = offset + i;
        auto const byte = static_cast<unsigned>(in[bit / 8]);
        v = (v << 1) | ((byte >> (7 - bit % 8)) & 1U);
    }
    return v;
}

/// Writes the low `width` (1 … 64) bits of `v` at big-endian bit offset `offset` of `out`,
/// leaving the other bits alone. The caller has checked that `out` holds them.
constexpr void put_bits(std::span<std::byte> out, std::size_t offset, std::size_t width, std::uint64_t v) noexcept {
    for (std::size_t i = 0; i < width; ++i) {
        std::size_t const bit = offset + i;
        auto const mask = static_cast<std::byte>(0x80U >> (bit % 8));
        if (((v >> (width - 1 - i)) & 1U) != 0)
            out[bit / 8] |= mask;
        else
            out[bit / 8] &= ~mask;
    }
}

/// True when `T`'s fields lie one after the other from bit 0 and fill exactly `T::size` bytes,
/// each in a member wide enough for it: checked at compile time for every attribute.
template <wire_layout T>
[[nodiscard]] consteval bool layout_is_contiguous() {
    T probe{};
    std::size_t next = 0;
    bool ok = true;
    T::for_each_field(probe, [&](std::string_view, std::size_t offset, std::size_t width, auto& member, show) {
        using M = std::remove_cvref_t<decltype(member)>;
        if (offset != next || width == 0) ok = false;
        if constexpr (std::is_same_v<M, rdmacxx::gid>) {
            if (width != 128 || offset % 8 != 0) ok = false;
        } else {
            if (width > 8 * sizeof(M)) ok = false;
        }
        next = offset + width;
    });
    return ok && next == 8 * T::size;
}

} // namespace detail

/// Writes `value`'s fields into the first `T::size` bytes of `out` (other bytes are left alone).
/// @throws argument_error when `out` is shorter than `T::size`, or naming the field when a
///         value does not fit its width (e.g. an SL of 16 in 4 bits): nothing is written then.
/// Thread-safety: reentrant.
template <wire_layout T>
void encode(T const& value, std::span<std::byte> out) {
    if (out.size() < T::size)
        throw argument_error("cannot encode " + std::string{T::name} + " into " + std::to_string(out.size()) +
                             " bytes: it takes " + std::to_string(T::size));
    T::for_each_field(value, [&](std::string_view field, std::size_t, std::size_t width, auto const& member, show) {
        using M = std::remove_cvref_t<decltype(member)>;
        if constexpr (!std::is_same_v<M, rdmacxx::gid>) {
            if (width < 64 && static_cast<std::uint64_t>(member) >> width != 0)
                throw argument_error(std::string{T::name} + "." + std::string{field} + " = " +
                                     std::to_string(static_cast<std::uint64_t>(member)) + " does not fit in its " +
                                     std::to_string(width) + " bits");
        }
    });
    T::for_each_field(value, [&](std::string_view, std::size_t offset, std::size_t width, auto const& member, show) {
        using M = std::remove_cvref_t<decltype(member)>;
        if constexpr (std::is_same_v<M, rdmacxx::gid>) {
            for (std::size_t i = 0; i < 16; ++i)
                out[offset / 8 + i] = static_cast<std::byte>(member.bytes()[i]);
        } else {
            detail::put_bits(out, offset, width, static_cast<std::uint64_t>(member));
        }
    });
}

/// `value` encoded: `T::size` bytes.
/// @throws argument_error naming the field when a value does not fit its width.
template <wire_layout T>
[[nodiscard]] std::array<std::byte, T::size> encode(T const& value) {
    std::array<std::byte, T::size> out{};
    encode(value, std::span<std::byte>{out});
    return out;
}

/// Reads a `T` from the first `T::size` bytes of `in`; every bit pattern decodes (reserved
/// fields are kept as they were on the wire).
/// @throws argument_error when `in` is shorter than `T::size`.
/// Thread-safety: reentrant.
template <wire_layout T>
[[nodiscard]] T decode(std::span<std::byte const> in) {
    if (in.size() < T::size)
        throw argument_error("cannot decode " + std::string{T::name} + " from " + std::to_string(in.size()) +
                             " bytes: it takes " + std::to_string(T::size));
    T value{};
    T::for_each_field(value, [&](std::string_view, std::size_t offset, std::size_t width, auto& member, show) {
        using M = std::remove_cvref_t<decltype(member)>;
        if constexpr (std::is_same_v<M, rdmacxx::gid>) {
            std::array<std::uint8_t, 16> b{};
            for (std::size_t i = 0; i < 16; ++i)
                b[i] = static_cast<std::uint8_t>(in[offset / 8 + i]);
            member = rdmacxx::gid{b};
        } else {
            member = static_cast<M>(detail::get_bits(in, offset, width));
        }
    });
    return value;
}

/// Prints `value` field by field, one `lead` + `Name: value` line each, in wire order, with the
/// specification's field names (`DGID: fe80::1`, `SL: 0`, `TransactionID: 0x1234`).
/// Thread-safety: reentrant.
template <wire_layout T>
void print(std::ostream& os, T const& value, std::string_view lead = {}) {
    T::for_each_field(value, [&](std::string_view field, std::size_t, std::size_t, auto const& member, show how) {
        using M = std::remove_cvref_t<decltype(member)>;
        os << lead << field << ": ";
        if constexpr (std::is_same_v<M, rdmacxx::gid>)
            os << member.to_string();
        else if (how == show::hex)
            os << "0x" << rdmacxx::detail::hex(static_cast<std::uint64_t>(member));
        else
            os << static_cast<std::uint64_t>(member);
        os << '\n';
    });
}

/// Prints `bytes` in hex, 16 bytes to a line as four 32-bit words (the rows of the
/// specification's tables), each line `lead`, the offset of its first byte in decimal, and the
/// words: `lead` `  0 01030281 03000000 00000000 00001234`.
/// Thread-safety: reentrant.
inline void print_hex(std::ostream& os, std::span<std::byte const> bytes, std::string_view lead = {}) {
    static constexpr char digits[] = "0123456789abcdef";
    for (std::size_t at = 0; at < bytes.size(); at += 16) {
        std::string line = std::to_string(at);
        line.insert(0, line.size() < 3 ? 3 - line.size() : 0, ' ');
        for (std::size_t i = at; i < at + 16 && i < bytes.size(); ++i) {
            if ((i - at) % 4 == 0) line += ' ';
            auto const b = static_cast<unsigned>(bytes[i]);
            line += digits[b >> 4];
            line += digits[b & 0xfU];
        }
        os << lead << line << '\n';
    }
}

} // namespace mad
} // namespace v0
} // namespace rdmacxx
