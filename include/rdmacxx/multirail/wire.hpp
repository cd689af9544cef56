#pragma once
/// @file
/// The wire formats of a multi-rail connection: what two peers exchange out of band to connect
/// (`rail_address`: every rail's endpoint and the side's nonce), what a peer needs to write into
/// memory registered on every rail (`remote_region`: address, length, one rkey per rail), and
/// the header in front of every message the connection sends on a rail (`message_header`).
/// Fixed-size for a number of rails, versioned and big-endian, as every wire format of rdmacxx
/// (detail/wire.hpp); decoding checks length, magic, version and reserved bits.

#include "rdmacxx/detail/wire.hpp"
#include "rdmacxx/endpoint.hpp"
#include "rdmacxx/error.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
/// Multi-rail connections: one connection over one RC QP per rail (RDMA device and port), with
/// striping, per-rail health, failover and rebuild (docs/multi-rail.md).
namespace multirail {

/// Rails a connection may have.
inline constexpr std::size_t max_rails = 8;

/// What one side of a multi-rail connection tells the other to connect (`connection::address`):
/// its nonce (a random 64-bit number: the larger one leads the rebuilds), its message window and
/// largest message (which the two sides must share), its epoch (how many connects it has made:
/// both sides take one more than the larger), and each rail's endpoint, rail 0 first. Encoding:
/// 32 bytes (magic "RXMA", version, rail count, 2 reserved bytes, the nonce, the window, the
/// message size, the epoch, 4 reserved bytes) and then 32 bytes per rail (`endpoint::to_bytes`).
struct rail_address {
    std::uint64_t nonce = 0;
    std::uint32_t window = 0;
    std::uint32_t message_bytes = 0;
    std::uint32_t epoch = 0;
    std::vector<endpoint> rails;

    /// Bytes of the encoding of `rails` rails.
    [[nodiscard]] static constexpr std::size_t wire_size(std::size_t rails) noexcept { return 32 + 32 * rails; }

    /// The encoding.
    /// @throws argument_error for no rail or more than `max_rails`, and what `endpoint::to_bytes` refuses.
    [[nodiscard]] std::vector<std::byte> to_bytes() const {
        if (rails.empty() || rails.size() > max_rails) [[unlikely]]
            detail::throw_argument("a multi-rail address has 1 to " + std::to_string(max_rails) + " rails, not " +
                                   std::to_string(rails.size()));
        std::vector<std::byte> out(wire_size(rails.size()));
        detail::wire::put_header(out.data(), magic);
        detail::wire::put<1>(out.data() + 5, rails.size());
        detail::wire::put<8>(out.data() + 8, nonce);
        detail::wire::put<4>(out.data() + 16, window);
        detail::wire::put<4>(out.data() + 20, message_bytes);
        detail::wire::put<4>(out.data() + 24, epoch);
        for (std::size_t r = 0; r < rails.size(); ++r) {
            auto const e = rails[r].to_bytes();
            for (std::size_t i = 0; i < e.size(); ++i)
                out[32 + 32 * r + i] = e[i];
        }
        return out;
    }
    /// Decodes `bytes`.
    /// @throws argument_error naming what is wrong: too short or long, a wrong magic or version,
    ///         reserved bits set, no rail or too many, a corrupt endpoint.
    [[nodiscard]] static rail_address from_bytes(std::span<std::byte const> bytes) {
        if (std::string why = detail::wire::header_fault(bytes, 32, magic, "a multi-rail address"); !why.empty())
            [[unlikely]]
            detail::throw_argument(std::move(why));
        auto const n = static_cast<std::size_t>(detail::wire::get<1>(bytes.data() + 5));
        if (n == 0 || n > max_rails) [[unlikely]]
            detail::throw_argument("cannot decode a multi-rail address: " + std::to_string(n) + " rails (1 to " +
                                   std::to_string(max_rails) + ")");
        if (detail::wire::get<2>(bytes.data() + 6) != 0 || detail::wire::get<4>(bytes.data() + 28) != 0) [[unlikely]]
            detail::throw_argument(detail::wire::reserved_fault("a multi-rail address", "the header"));
        if (bytes.size() != wire_size(n)) [[unlikely]]
            detail::throw_argument("cannot decode a multi-rail address of " + std::to_string(n) +
                                   " rails: " + std::to_string(bytes.size()) + " bytes, its encoding has " +
                                   std::to_string(wire_size(n)));
        rail_address a;
        a.nonce = detail::wire::get<8>(bytes.data() + 8);
        a.window = static_cast<std::uint32_t>(detail::wire::get<4>(bytes.data() + 16));
        a.message_bytes = static_cast<std::uint32_t>(detail::wire::get<4>(bytes.data() + 20));
        a.epoch = static_cast<std::uint32_t>(detail::wire::get<4>(bytes.data() + 24));
        for (std::size_t r = 0; r < n; ++r)
            a.rails.push_back(endpoint::from_bytes(bytes.subspan(32 + 32 * r, 32)));
        return a;
    }

private:
    static constexpr std::array<char, 4> magic{'R', 'X', 'M', 'A'};
};

/// Memory registered on every rail of a connection, as its peer sees it: the address, the length
/// in bytes and one rkey per rail, rail 0 first (`region::remote`). A plain value to send to
/// the peer. Encoding: 24 bytes (magic "RXMR", version, rail count, 2 reserved bytes, address,
/// length) and 4 bytes per rkey.
struct remote_region {
    std::uint64_t address = 0;
    std::uint64_t length = 0;
    std::vector<std::uint32_t> rkeys;

    /// Bytes of the encoding of `rails` rails.
    [[nodiscard]] static constexpr std::size_t wire_size(std::size_t rails) noexcept { return 24 + 4 * rails; }

    /// The encoding.
    /// @throws argument_error for no rkey or more than `max_rails`.
    [[nodiscard]] std::vector<std::byte> to_bytes() const {
        if (rkeys.empty() || rkeys.size() > max_rails) [[unlikely]]
            detail::throw_argument("a remote region has 1 to " + std::to_string(max_rails) + " rkeys, not " +
                                   std::to_string(rkeys.size()));
        std::vector<std::byte> out(wire_size(rkeys.size()));
        detail::wire::put_header(out.data(), magic);
        detail::wire::put<1>(out.data() + 5, rkeys.size());
        detail::wire::put<8>(out.data() + 8, address);
        detail::wire::put<8>(out.data() + 16, length);
        for (std::size_t r = 0; r < rkeys.size(); ++r)
            detail::wire::put<4>(out.data() + 24 + 4 * r, rkeys[r]);
        return out;
    }
    /// Decodes `bytes`.
    /// @throws argument_error naming what is wrong, as `rail_address::from_bytes`.
    [[nodiscard]] static remote_region from_bytes(std::span<std::byte const> bytes) {
        if (std::string why = detail::wire::header_fault(bytes, 24, magic, "a remote region"); !why.empty())
            [[unlikely]]
            detail::throw_argument(std::move(why));
        auto const n = static_cast<std::size_t>(detail::wire::get<1>(bytes.data() + 5));
        if (n == 0 || n > max_rails) [[unlikely]]
            detail::throw_argument("cannot decode a remote region: " + std::to_string(n) + " rkeys (1 to " +
                                   std::to_string(max_rails) + ")");
        if (detail::wire::get<2>(bytes.data() + 6) != 0) [[unlikely]]
            detail::throw_argument(detail::wire::reserved_fault("a remote region", "the header"));
        if (bytes.size() != wire_size(n)) [[unlikely]]
            detail::throw_argument("cannot decode a remote region of " + std::to_string(n) +
                                   " rkeys: " + std::to_string(bytes.size()) + " bytes, its encoding has " +
                                   std::to_string(wire_size(n)));
        remote_region r;
        r.address = detail::wire::get<8>(bytes.data() + 8);
        r.length = detail::wire::get<8>(bytes.data() + 16);
        for (std::size_t k = 0; k < n; ++k)
            r.rkeys.push_back(static_cast<std::uint32_t>(detail::wire::get<4>(bytes.data() + 24 + 4 * k)));
        return r;
    }

private:
    static constexpr std::array<char, 4> magic{'R', 'X', 'M', 'R'};
};

/// What a message on a rail carries.
enum class message_kind : std::uint8_t {
    data = 1,    ///< the user's message (sequenced)
    notice = 2,  ///< a striped WRITE arrived whole (sequenced): its id and bytes
    ack = 3,     ///< the receiver's cumulative acknowledgement (not sequenced)
    ask = 4,     ///< rebuild rail `rail`, whose port is active again (sequenced; to the leader)
    request = 5, ///< the leader's new QP of rail `rail`: its generation and endpoint (sequenced)
    reply = 6,   ///< the follower's new QP of rail `rail`, connected: its endpoint (sequenced)
    done = 7,    ///< the leader's new QP is connected: rail `rail` is up (sequenced)
};

/// The header in front of every message of a multi-rail connection: 32 bytes, magic "RXMM",
/// version, kind, rail (control messages), a reserved byte, the sequence number (0 for an
/// acknowledgement), the cumulative acknowledgement of the sender's receive side (the highest
/// sequence number it has delivered in order), the payload's length in bytes and a 32-bit
/// immediate.
struct message_header {
    message_kind kind = message_kind::data;
    std::uint8_t rail = 0;
    std::uint64_t seq = 0;
    std::uint64_t ack = 0;
    std::uint32_t length = 0;
    std::uint32_t imm = 0;

    /// Bytes of the encoding.
    static constexpr std::size_t wire_size = 32;

    /// Writes the encoding at `out` (`wire_size` bytes).
    void write(std::byte* out) const noexcept {
        detail::wire::put_header(out, magic);
        detail::wire::put<1>(out + 5, static_cast<std::uint8_t>(kind));
        detail::wire::put<1>(out + 6, rail);
        detail::wire::put<1>(out + 7, 0);
        detail::wire::put<8>(out + 8, seq);
        detail::wire::put<8>(out + 16, ack);
        detail::wire::put<4>(out + 24, length);
        detail::wire::put<4>(out + 28, imm);
    }
    /// Decodes the header of a message of `bytes` bytes (its header and its payload).
    /// @throws argument_error naming what is wrong: too short, a wrong magic or version, a
    ///         reserved byte set, an unknown kind, a payload length over what arrived.
    [[nodiscard]] static message_header read(std::span<std::byte const> bytes) {
        if (std::string why = detail::wire::header_fault(bytes, wire_size, magic, "a multi-rail message"); !why.empty())
            [[unlikely]]
            detail::throw_argument(std::move(why));
        std::byte const* in = bytes.data();
        message_header h;
        auto const kind = detail::wire::get<1>(in + 5);
        if (kind < 1 || kind > 7) [[unlikely]]
            detail::throw_argument("cannot decode a multi-rail message: kind " + std::to_string(kind) + " is unknown");
        if (in[7] != std::byte{0}) [[unlikely]]
            detail::throw_argument(detail::wire::reserved_fault("a multi-rail message", "the header"));
        h.kind = static_cast<message_kind>(kind);
        h.rail = static_cast<std::uint8_t>(detail::wire::get<1>(in + 6));
        h.seq = detail::wire::get<8>(in + 8);
        h.ack = detail::wire::get<8>(in + 16);
        h.length = static_cast<std::uint32_t>(detail::wire::get<4>(in + 24));
        h.imm = static_cast<std::uint32_t>(detail::wire::get<4>(in + 28));
        if (h.kind == message_kind::ack && (h.seq != 0 || h.length != 0)) [[unlikely]]
            detail::throw_argument("cannot decode a multi-rail message: an acknowledgement with a sequence number or "
                                   "a payload");
        if (h.kind != message_kind::ack && h.seq == 0) [[unlikely]]
            detail::throw_argument("cannot decode a multi-rail message: a numbered message with number 0");
        if (h.length > bytes.size() - wire_size) [[unlikely]]
            detail::throw_argument("cannot decode a multi-rail message: its payload of " + std::to_string(h.length) +
                                   " bytes is longer than the " + std::to_string(bytes.size() - wire_size) +
                                   " bytes that arrived");
        return h;
    }

private:
    static constexpr std::array<char, 4> magic{'R', 'X', 'M', 'M'};
};

} // namespace multirail
} // namespace v0
} // namespace rdmacxx
