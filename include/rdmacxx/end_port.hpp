#pragma once
/// @file
/// `end_port`: one port of an open device together with the GID its connections use.

#include "rdmacxx/context.hpp"

#include <cstdint>
#include <string>

namespace rdmacxx {
inline namespace v0 {

/// A port of an open device and the GID table entry connections from it use, with the port's
/// attributes as they were when it was made. Queue pairs take it to move to INIT and RTR.
/// Holds a non-owning reference to its `context`.
class end_port {
public:
    /// Port `port_num` (1-based) of `ctx`, with the GID at `gid_index`, or when `gid_index` is
    /// negative the one `context::select_gid` picks (RoCE v2 and routable first).
    /// @throws sys_error when the port or GID cannot be queried (e.g. no such port);
    ///         argument_error when the port has no usable GID.
    end_port(rdmacxx::context& ctx, std::uint8_t port_num = 1, int gid_index = -1)
        : context_(&ctx), port_num_(port_num), attributes_(ctx.query_port(port_num)) {
        if (gid_index < 0) {
            gid_ = ctx.select_gid(port_num);
        } else {
            bool found = false;
            for (auto const& e : ctx.gid_table(port_num))
                if (e.index == static_cast<std::uint32_t>(gid_index)) {
                    gid_ = e;
                    found = true;
                }
            if (!found) [[unlikely]]
                detail::throw_argument("GID index " + std::to_string(gid_index) + " of port " + std::string{ctx.name()} +
                                       "/" + std::to_string(port_num) + " is empty or out of range");
        }
    }

    /// The open device.
    [[nodiscard]] rdmacxx::context& context() const noexcept { return *context_; }
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
        return std::string{context_->name()} + "/" + std::to_string(port_num_);
    }

private:
    rdmacxx::context* context_;
    std::uint8_t port_num_;
    port_attributes attributes_;
    gid_entry gid_;
};

} // namespace v0
} // namespace rdmacxx
