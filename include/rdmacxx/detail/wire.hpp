#pragma once
/// @file
/// Internals of the wire formats (endpoint.hpp, memory.hpp, bootstrap/peer_group.hpp):
/// big-endian fields and the common header (4-byte magic, 1-byte version) checked on decoding.
/// The checks say what is wrong and the caller throws (`argument_error`): this layer knows no
/// error type.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace rdmacxx {
inline namespace v0 {
namespace detail::wire {

/// The version every encoding of this library writes and the only one it reads.
inline constexpr std::uint8_t version = 1;

/// Writes the low `Bytes` bytes of `v` at `at`, most significant first.
template <std::size_t Bytes>
constexpr void put(std::byte* at, std::uint64_t v) noexcept {
    for (std::size_t i = 0; i < Bytes; ++i)
        at[i] = static_cast<std::byte>((v >> (8 * (Bytes - 1 - i))) & 0xffU);
}

/// Reads `Bytes` bytes at `at`, most significant first.
template <std::size_t Bytes>
[[nodiscard]] constexpr std::uint64_t get(std::byte const* at) noexcept {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < Bytes; ++i)
        v = (v << 8) | static_cast<std::uint64_t>(at[i]);
    return v;
}

/// Writes the 4-byte `magic` and the version at the start of `out`.
constexpr void put_header(std::byte* out, std::array<char, 4> const& magic) noexcept {
    for (std::size_t i = 0; i < 4; ++i)
        out[i] = static_cast<std::byte>(magic[i]);
    out[4] = static_cast<std::byte>(version);
}

/// What is wrong with `in` as the start of `what`'s encoding (at least `size` bytes that start
/// with `magic` and this version), naming `what`; empty when nothing is.
[[nodiscard]] inline std::string header_fault(std::span<std::byte const> in, std::size_t size,
                                              std::array<char, 4> const& magic, char const* what) {
    if (in.size() < size) [[unlikely]]
        return std::string{"cannot decode "} + what + ": " + std::to_string(in.size()) +
               " bytes are too short, the encoding has " + std::to_string(size);
    for (std::size_t i = 0; i < 4; ++i)
        if (in[i] != static_cast<std::byte>(magic[i])) [[unlikely]]
            return std::string{"cannot decode "} + what + ": corrupt, the magic is not \"" +
                   std::string{magic.data(), 4} + "\"";
    if (auto const v = static_cast<std::uint8_t>(in[4]); v != version) [[unlikely]]
        return std::string{"cannot decode "} + what + ": wire-format version " + std::to_string(v) +
               ", this library reads version " + std::to_string(version);
    return {};
}

/// The complaint about set reserved bits of `field` in `what`'s encoding.
[[nodiscard]] inline std::string reserved_fault(char const* what, char const* field) {
    return std::string{"cannot decode "} + what + ": corrupt, reserved bits of " + field + " are set";
}

} // namespace detail::wire
} // namespace v0
} // namespace rdmacxx
