#pragma once
/// @file
/// Typed private data: `cm::to_private_data` encodes values (a trivially copyable struct, or a
/// type with a wire format such as `endpoint` and `remote_span`) into the bytes a connect,
/// accept or reject message carries, its size checked against the port space's limit at compile
/// time; `cm::from_private_data` decodes the bytes a peer sent.

#include "rdmacxx/cm/id.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/transport.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// A type with a portable wire format: a `wire_size` constant, `to_bytes()` giving that many
/// bytes and a static `from_bytes(span)` reading them back (`endpoint`, `remote_span<T>`).
template <class T>
concept wire_encodable = requires(T const& v, std::span<std::byte const> in) {
    { T::wire_size } -> std::convertible_to<std::size_t>;
    { v.to_bytes() } -> std::same_as<std::array<std::byte, T::wire_size>>;
    { T::from_bytes(in) } -> std::same_as<T>;
};

/// A type that may travel as private data: one with a wire format (encoded portably, big-endian,
/// versioned), or else a trivially copyable one (copied as its bytes: both peers must agree on
/// its layout and byte order).
template <class T>
concept private_data_value = wire_encodable<T> || std::is_trivially_copyable_v<T>;

/// Bytes `T` takes in private data: its `wire_size`, else `sizeof(T)`.
template <private_data_value T>
inline constexpr std::size_t private_data_size = [] {
    if constexpr (wire_encodable<T>)
        return std::size_t{T::wire_size};
    else
        return sizeof(T);
}();

/// Encodes `values` one after the other (each as `private_data_size` bytes) into the private
/// data of a `Message` on the port space of `Transport`; copy the result into
/// `connection_options::private_data` (or pass it to `id::connect` / `id::accept`). Their total
/// size is checked at compile time: more than the CM's limit (`max_private_data`: a connect
/// request on the TCP port space carries 56 bytes, an accept 196) does not compile.
/// Example: `auto pd = cm::to_private_data<cm::private_data_message::accept, rx::rc>(mr.remote());`
/// @throws argument_error when a value's `to_bytes()` refuses it (e.g. an endpoint's QPN over 24 bits).
template <private_data_message Message, transport Transport, private_data_value... Ts>
    requires(sizeof...(Ts) > 0)
[[nodiscard]] std::array<std::byte, (private_data_size<Ts> + ...)> to_private_data(Ts const&... values) {
    constexpr std::size_t total = (private_data_size<Ts> + ...);
    static_assert(total <= max_private_data(Message, port_space_for<Transport>),
                  "the private data is larger than the CM message can carry on this port space (56 bytes in a "
                  "connect request, 196 in an accept, 148 in a reject on the TCP port space; 180, 136 and 136 on UDP)");
    std::array<std::byte, total> out{};
    std::size_t at = 0;
    auto put = [&]<class T>(T const& v) {
        if constexpr (wire_encodable<T>) {
            auto const bytes = v.to_bytes();
            std::memcpy(out.data() + at, bytes.data(), bytes.size());
        } else {
            std::memcpy(out.data() + at, &v, sizeof(T));
        }
        at += private_data_size<T>;
    };
    (put(values), ...);
    return out;
}

/// Decodes what `to_private_data` encoded, from the private data a peer sent (the CM pads it
/// with zeros: a longer buffer is fine): one `T` as itself, several as a `std::tuple`. Types with
/// a wire format are checked by their `from_bytes` (magic, version, reserved bits).
/// @throws argument_error when `bytes` is shorter than the values' total size, or a wire format
///         does not decode.
template <private_data_value... Ts>
    requires(sizeof...(Ts) > 0 && (std::is_default_constructible_v<Ts> && ...))
[[nodiscard]] auto from_private_data(std::span<std::byte const> bytes) {
    constexpr std::size_t total = (private_data_size<Ts> + ...);
    if (bytes.size() < total) [[unlikely]]
        rdmacxx::detail::throw_argument("cannot decode private data: " + std::to_string(bytes.size()) +
                                        " bytes came, the values take " + std::to_string(total));
    std::size_t at = 0;
    auto get = [&]<class T>(std::type_identity<T>) {
        T v{};
        if constexpr (wire_encodable<T>)
            v = T::from_bytes(bytes.subspan(at, T::wire_size));
        else
            std::memcpy(&v, bytes.data() + at, sizeof(T));
        at += private_data_size<T>;
        return v;
    };
    if constexpr (sizeof...(Ts) == 1)
        return get(std::type_identity<Ts...>{});
    else
        return std::tuple<Ts...>{get(std::type_identity<Ts>{})...}; // braces: evaluated left to right
}

} // namespace cm
} // namespace v0
} // namespace rdmacxx
