#pragma once
/// @file
/// `context`: an open RDMA device, with its device and port attributes and its GID table.

#include "rdmacxx/device.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"

#include <net/if.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {

/// The bytes of a path MTU enumerator: IBV_MTU_1024 → 1024; 0 for an invalid value.
[[nodiscard]] constexpr std::uint32_t mtu_bytes(ibv_mtu mtu) noexcept {
    switch (mtu) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
    }
    return 0;
}

/// The path MTU enumerator for 256, 512, 1024, 2048 or 4096 bytes.
/// @throws argument_error for any other value.
[[nodiscard]] inline ibv_mtu mtu_from_bytes(std::uint32_t bytes) {
    switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: break;
    }
    detail::throw_argument("invalid path MTU " + std::to_string(bytes) + " bytes (one of 256, 512, 1024, 2048, 4096)");
}

/// The type of a GID table entry.
enum class gid_type : std::uint32_t {
    ib = IBV_GID_TYPE_IB,           ///< InfiniBand
    roce_v1 = IBV_GID_TYPE_ROCE_V1, ///< RoCE v1 (Ethernet, no IP header)
    roce_v2 = IBV_GID_TYPE_ROCE_V2, ///< RoCE v2 (UDP/IP, routable)
};

/// "IB", "RoCE v1" or "RoCE v2".
[[nodiscard]] constexpr char const* to_string(gid_type t) noexcept {
    switch (t) {
    case gid_type::ib: return "IB";
    case gid_type::roce_v1: return "RoCE v1";
    case gid_type::roce_v2: return "RoCE v2";
    }
    return "unknown";
}

/// One populated entry of a port's GID table. @see ibv_query_gid_ex(3)
struct gid_entry {
    std::uint32_t index = 0;        ///< position in the table
    rdmacxx::gid gid;               ///< the GID
    gid_type type = gid_type::ib;   ///< IB, RoCE v1 or RoCE v2
    std::uint32_t ndev_ifindex = 0; ///< interface index of the network device, 0 when none

    /// The network device's name ("eth0"), empty when none or when it is gone.
    [[nodiscard]] std::string netdev_name() const {
        char buf[IF_NAMESIZE] = {};
        if (ndev_ifindex == 0 || ::if_indextoname(ndev_ifindex, buf) == nullptr) return {};
        return buf;
    }
};

/// Attributes of one port, as ibv_query_port(3) reports them.
/// A value type; `native()` gives every field.
class port_attributes {
public:
    explicit port_attributes(ibv_port_attr const& attr) noexcept : attr_(attr) {}
    /// DOWN, INIT, ARMED, ACTIVE, …
    [[nodiscard]] ibv_port_state state() const noexcept { return attr_.state; }
    /// True when the port state is ACTIVE.
    [[nodiscard]] bool active() const noexcept { return attr_.state == IBV_PORT_ACTIVE; }
    /// The port's LID (0 on Ethernet).
    [[nodiscard]] std::uint16_t lid() const noexcept { return attr_.lid; }
    /// The active MTU, the largest path MTU a QP on this port may use.
    [[nodiscard]] ibv_mtu active_mtu() const noexcept { return attr_.active_mtu; }
    /// The largest MTU the port supports.
    [[nodiscard]] ibv_mtu max_mtu() const noexcept { return attr_.max_mtu; }
    /// IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET.
    [[nodiscard]] std::uint8_t link_layer() const noexcept { return attr_.link_layer; }
    /// True for a RoCE (Ethernet) port, where addressing needs a GRH and a GID.
    [[nodiscard]] bool is_ethernet() const noexcept { return attr_.link_layer == IBV_LINK_LAYER_ETHERNET; }
    /// Number of GID table entries.
    [[nodiscard]] int gid_table_length() const noexcept { return attr_.gid_tbl_len; }
    /// Number of P_Key table entries.
    [[nodiscard]] std::uint16_t pkey_table_length() const noexcept { return attr_.pkey_tbl_len; }
    /// The active link width code (1x = 1, 4x = 2, 8x = 4, 12x = 8, 2x = 16).
    [[nodiscard]] std::uint8_t active_width() const noexcept { return attr_.active_width; }
    /// The active link speed code (see ibv_query_port(3)).
    [[nodiscard]] std::uint8_t active_speed() const noexcept { return attr_.active_speed; }
    /// Every field.
    [[nodiscard]] ibv_port_attr const& native() const noexcept { return attr_; }

private:
    ibv_port_attr attr_;
};

/// An open RDMA device (`ibv_context`). Owns the handle; move-only; closes it on destruction,
/// which must come after every object made from it is gone.
/// Thread-safety: verbs contexts are thread-safe; so are these queries.
/// @see ibv_open_device(3)
class context {
public:
    /// Takes ownership of an open `ibv_context`.
    explicit context(ibv_context* handle) noexcept : handle_(handle) {}

    /// The device this context was opened on.
    [[nodiscard]] rdmacxx::device device() const noexcept { return rdmacxx::device{handle_->device}; }
    /// The device's name.
    [[nodiscard]] std::string_view name() const noexcept { return device().name(); }

    /// Device attributes, including the extended ones.
    /// @throws sys_error when ibv_query_device_ex(3) fails.
    [[nodiscard]] ibv_device_attr_ex query_device() const {
        ibv_device_attr_ex attr{};
        if (int rc = ::ibv_query_device_ex(handle_.get(), nullptr, &attr); rc != 0) [[unlikely]]
            detail::throw_sys(rc, "ibv_query_device_ex", "on " + std::string{name()});
        return attr;
    }

    /// Attributes of port `port_num` (1-based).
    /// @throws sys_error naming the port when ibv_query_port(3) fails (e.g. no such port).
    [[nodiscard]] port_attributes query_port(std::uint8_t port_num) const {
        ibv_port_attr attr{};
        if (int rc = ::ibv_query_port(handle_.get(), port_num, &attr); rc != 0) [[unlikely]]
            detail::throw_sys(rc, "ibv_query_port", "for port " + std::string{name()} + "/" + std::to_string(port_num));
        return port_attributes{attr};
    }

    /// The GID at `index` of port `port_num`, without its type.
    /// @throws sys_error when ibv_query_gid(3) fails.
    [[nodiscard]] rdmacxx::gid query_gid(std::uint8_t port_num, int index) const {
        ibv_gid raw{};
        if (::ibv_query_gid(handle_.get(), port_num, index, &raw) != 0) [[unlikely]]
            detail::throw_errno("ibv_query_gid", "for GID index " + std::to_string(index) + " of port " +
                                                     std::string{name()} + "/" + std::to_string(port_num));
        return rdmacxx::gid{raw};
    }

    /// The populated GID table entries of port `port_num` (empty slots are left out), each with its
    /// type and network device.
    /// @throws sys_error when the port cannot be queried or ibv_query_gid_ex(3) fails other than
    ///         with ENODATA (an empty slot).
    [[nodiscard]] std::vector<gid_entry> gid_table(std::uint8_t port_num) const {
        auto const port = query_port(port_num);
        std::vector<gid_entry> table;
        for (int i = 0; i < port.gid_table_length(); ++i) {
            ibv_gid_entry e{};
            int const rc = ::ibv_query_gid_ex(handle_.get(), port_num, static_cast<std::uint32_t>(i), &e, 0);
            if (rc == ENODATA) continue;
            if (rc != 0) [[unlikely]]
                detail::throw_sys(rc, "ibv_query_gid_ex", "for GID index " + std::to_string(i));
            rdmacxx::gid const g{e.gid};
            if (g.is_zero()) continue;
            table.push_back({e.gid_index, g, static_cast<gid_type>(e.gid_type), e.ndev_ifindex});
        }
        return table;
    }

    /// Picks the GID a connection from port `port_num` should use. For RoCE ports: a RoCE v2
    /// GID before a RoCE v1 one, a routable one (IPv4-mapped or global) before a link-local
    /// one, and among equals the lowest index. For InfiniBand ports: index 0.
    /// @throws argument_error when the port has no usable GID.
    [[nodiscard]] gid_entry select_gid(std::uint8_t port_num) const {
        auto const table = gid_table(port_num);
        auto score = [](gid_entry const& e) {
            int s = 0;
            if (e.type == gid_type::roce_v2) s += 4;
            if (!e.gid.is_link_local()) s += 2;
            if (e.ndev_ifindex != 0) s += 1;
            return s;
        };
        gid_entry const* best = nullptr;
        for (auto const& e : table)
            if (best == nullptr || score(e) > score(*best)) best = &e;
        if (best == nullptr) [[unlikely]]
            detail::throw_argument("port " + std::string{name()} + "/" + std::to_string(port_num) +
                                   " has no populated GID table entry");
        if (best->type == gid_type::ib)
            for (auto const& e : table)
                if (e.index == 0) return e;
        return *best;
    }

    /// The verbs handle.
    [[nodiscard]] ibv_context* native_handle() const noexcept { return handle_.get(); }

private:
    struct deleter {
        void operator()(ibv_context* c) const noexcept { (void)::ibv_close_device(c); }
    };
    std::unique_ptr<ibv_context, deleter> handle_;
};

inline context device::open() const {
    ibv_context* const ctx = ::ibv_open_device(handle_);
    if (ctx == nullptr) [[unlikely]]
        detail::throw_errno("ibv_open_device", "for device " + std::string{name()});
    return context{ctx};
}

} // namespace v0
} // namespace rdmacxx
