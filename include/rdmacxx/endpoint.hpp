#pragma once
/// @file
/// `endpoint`: what a peer needs to connect to a QP (LID, QPN, PSN, GID, path MTU), and its
/// portable wire format.

#include "rdmacxx/detail/verbs.hpp"
#include "rdmacxx/detail/wire.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

/// What a peer needs to connect to a QP: LID, QP number, starting PSN, GID and the largest path
/// MTU this side can use. A plain value to exchange out of band (TCP, a file, the CM, a
/// bootstrap): `to_bytes()` gives its portable encoding, `from_bytes()` reads it back.
/// `queue_pair::connect` uses the smaller of its own path MTU and `path_mtu` (when set), so two
/// sides that exchanged endpoints agree on one path MTU.
///
/// Wire format (`wire_size` = 32 bytes, all integers big-endian):
///
/// | offset | bytes | field |
/// |---|---|---|
/// | 0 | 4 | magic `"RXEP"` |
/// | 4 | 1 | version, 1 |
/// | 5 | 1 | path MTU as `ibv_mtu` (0 = not said, 1 … 5 = 256 … 4096 bytes) |
/// | 6 | 2 | LID |
/// | 8 | 4 | QPN (the top 8 bits reserved, 0) |
/// | 12 | 4 | PSN (the top 8 bits reserved, 0) |
/// | 16 | 16 | GID, network order |
///
/// Thread-safety: a value type.
struct endpoint {
    std::uint16_t lid = 0;        ///< the port's LID (0 on RoCE)
    std::uint32_t qpn = 0;        ///< the QP number (24 bits)
    std::uint32_t psn = 0;        ///< the first packet sequence number it sends (24 bits)
    rdmacxx::gid gid;             ///< the port GID it sends from
    ibv_mtu path_mtu = ibv_mtu{}; ///< the largest path MTU it can use; 0 = not said (its peer uses its own)
    friend bool operator==(endpoint const&, endpoint const&) = default;

    /// Bytes of the encoding.
    static constexpr std::size_t wire_size = 32;

    /// The encoding described above.
    /// @throws argument_error when `qpn` or `psn` is over 24 bits or `path_mtu` is not an MTU.
    [[nodiscard]] std::array<std::byte, wire_size> to_bytes() const {
        if (qpn > 0xffffffU || psn > 0xffffffU) [[unlikely]]
            detail::throw_argument("cannot encode an endpoint whose QPN " + std::to_string(qpn) + " or PSN " +
                                   std::to_string(psn) + " is over 24 bits");
        auto const mtu = static_cast<std::uint32_t>(path_mtu);
        if (mtu > IBV_MTU_4096) [[unlikely]]
            detail::throw_argument("cannot encode an endpoint whose path MTU code " + std::to_string(mtu) +
                                   " is not one of 0 … 5");
        std::array<std::byte, wire_size> out{};
        detail::wire::put_header(out.data(), magic);
        detail::wire::put<1>(out.data() + 5, mtu);
        detail::wire::put<2>(out.data() + 6, lid);
        detail::wire::put<4>(out.data() + 8, qpn);
        detail::wire::put<4>(out.data() + 12, psn);
        for (std::size_t i = 0; i < 16; ++i)
            out[16 + i] = static_cast<std::byte>(gid.bytes()[i]);
        return out;
    }

    /// Decodes the first `wire_size` bytes of `bytes` (a longer buffer, such as the padded
    /// private data of a CM event, is fine).
    /// @throws argument_error naming what is wrong: too short, a wrong magic (not an endpoint),
    ///         another version, reserved bits set, a path MTU code over 5.
    [[nodiscard]] static endpoint from_bytes(std::span<std::byte const> bytes) {
        if (std::string why = detail::wire::header_fault(bytes, wire_size, magic, "an endpoint"); !why.empty())
            [[unlikely]]
            detail::throw_argument(std::move(why));
        std::byte const* in = bytes.data();
        auto const mtu = detail::wire::get<1>(in + 5);
        if (mtu > IBV_MTU_4096) [[unlikely]]
            detail::throw_argument("cannot decode an endpoint: corrupt, path MTU code " + std::to_string(mtu) +
                                   " is not one of 0 … 5");
        if (in[8] != std::byte{0}) [[unlikely]]
            detail::throw_argument(detail::wire::reserved_fault("an endpoint", "the QPN"));
        if (in[12] != std::byte{0}) [[unlikely]]
            detail::throw_argument(detail::wire::reserved_fault("an endpoint", "the PSN"));
        std::array<std::uint8_t, 16> g{};
        for (std::size_t i = 0; i < 16; ++i)
            g[i] = static_cast<std::uint8_t>(in[16 + i]);
        endpoint e;
        e.lid = static_cast<std::uint16_t>(detail::wire::get<2>(in + 6));
        e.qpn = static_cast<std::uint32_t>(detail::wire::get<4>(in + 8));
        e.psn = static_cast<std::uint32_t>(detail::wire::get<4>(in + 12));
        e.gid = rdmacxx::gid{g};
        e.path_mtu = static_cast<ibv_mtu>(mtu);
        return e;
    }

private:
    static constexpr std::array<char, 4> magic{'R', 'X', 'E', 'P'};
};

} // namespace v0
} // namespace rdmacxx
