#pragma once
/// @file
/// `context`: an open RDMA device, with its device and port attributes, its GID and P_Key tables
/// and GID selection.

#include "rdmacxx/device.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"
#include "rdmacxx/limits.hpp"
#include "rdmacxx/ownership.hpp"

#include <ifaddrs.h>
#include <net/if.h>

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {

/// The bytes of a path MTU enumerator: IBV_MTU_1024 → 1024; 0 for an invalid value.
[[nodiscard]] constexpr std::uint32_t mtu_bytes(ibv_mtu mtu) noexcept {
    switch (mtu) {
    case IBV_MTU_256:
        return 256;
    case IBV_MTU_512:
        return 512;
    case IBV_MTU_1024:
        return 1024;
    case IBV_MTU_2048:
        return 2048;
    case IBV_MTU_4096:
        return 4096;
    }
    return 0;
}

/// The path MTU enumerator for 256, 512, 1024, 2048 or 4096 bytes.
/// @throws argument_error for any other value.
[[nodiscard]] inline ibv_mtu mtu_from_bytes(std::uint32_t bytes) {
    switch (bytes) {
    case 256:
        return IBV_MTU_256;
    case 512:
        return IBV_MTU_512;
    case 1024:
        return IBV_MTU_1024;
    case 2048:
        return IBV_MTU_2048;
    case 4096:
        return IBV_MTU_4096;
    default:
        break;
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
    case gid_type::ib:
        return "IB";
    case gid_type::roce_v1:
        return "RoCE v1";
    case gid_type::roce_v2:
        return "RoCE v2";
    }
    return "unknown";
}

/// One populated entry of a port's GID table. @see ibv_query_gid_ex(3)
struct gid_entry {
    std::uint32_t index = 0;        ///< position in the table
    rdmacxx::gid gid;               ///< the GID
    gid_type type = gid_type::ib;   ///< IB, RoCE v1 or RoCE v2
    std::uint32_t ndev_ifindex = 0; ///< interface index of the network device, 0 when none
    std::uint32_t port = 0;         ///< the port (1-based) whose table holds the entry

    /// The network device's name ("eth0"), empty when none or when it is gone.
    [[nodiscard]] std::string netdev_name() const {
        char buf[IF_NAMESIZE] = {};
        if (ndev_ifindex == 0 || ::if_indextoname(ndev_ifindex, buf) == nullptr) return {};
        return buf;
    }

    /// True when the entry is bound to a network device that is administratively up (`IFF_UP`,
    /// as `ip link set DEV up` sets it). False when it has no network device, when the device is
    /// gone or down, or when getifaddrs(3) fails.
    /// @see getifaddrs(3), netdevice(7)
    [[nodiscard]] bool netdev_up() const {
        std::string const dev = netdev_name();
        if (dev.empty()) return false;
        ifaddrs* list = nullptr;
        if (::getifaddrs(&list) != 0) return false;
        bool up = false;
        for (ifaddrs const* a = list; a != nullptr; a = a->ifa_next)
            if (a->ifa_name != nullptr && dev == a->ifa_name && (a->ifa_flags & IFF_UP) != 0) up = true;
        ::freeifaddrs(list);
        return up;
    }

    /// "[1] ::ffff:198.18.0.1 RoCE v2 eth0": index, GID, type and network device (when any).
    [[nodiscard]] std::string to_string() const {
        // Appended piece by piece: GCC 12 at -O3 misreports `"[" + std::string&&` under -Werror=restrict.
        std::string s(1, '[');
        s.append(std::to_string(index)).append("] ").append(gid.to_string()).append(" ");
        s.append(rdmacxx::to_string(type));
        if (auto const dev = netdev_name(); !dev.empty()) s.append(" ").append(dev);
        return s;
    }
};

/// How `context::select_gid` and `end_port` choose a GID table entry. The default (all fields
/// unset) picks, on a RoCE port, by these rules in order of weight:
///   1. a RoCE v2 GID before a RoCE v1 (or IB) one: v2 is routable over UDP/IP;
///   2. a routable GID (IPv4-mapped `::ffff:a.b.c.d` or global) before a link-local (fe80::/10) one;
///   3. a GID bound to a network device that is up before one whose device is down or gone;
///   4. among equals, the lowest index.
/// On an InfiniBand port it picks index 0, the port GID. Each field, when set, overrides:
/// `index` takes that entry as it is; `address` takes the entry holding that GID; `type` keeps
/// only entries of that type before the rules run.
struct gid_selector {
    std::optional<std::uint32_t> index;    ///< use exactly this GID table index
    std::optional<rdmacxx::gid> address;   ///< use the entry holding this GID
    std::optional<rdmacxx::gid_type> type; ///< consider only entries of this type
};

/// The text of a port state, as ibv_port_state_str(3) gives it: "down", "init", "armed",
/// "active", "active defer", "no state change (NOP)".
/// @see ibv_port_state_str(3)
[[nodiscard]] inline std::string_view to_string(ibv_port_state state) noexcept { return ::ibv_port_state_str(state); }

/// "InfiniBand", "Ethernet" or "unspecified" for a port's link layer code.
[[nodiscard]] constexpr std::string_view link_layer_name(std::uint8_t link_layer) noexcept {
    switch (link_layer) {
    case IBV_LINK_LAYER_INFINIBAND:
        return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET:
        return "Ethernet";
    default:
        return "unspecified";
    }
}

/// The link width for an `active_width` code: "1X", "2X", "4X", "8X", "12X", or "unknown".
/// @see ibv_query_port(3)
[[nodiscard]] constexpr std::string_view link_width_name(std::uint8_t width) noexcept {
    switch (width) {
    case 1:
        return "1X";
    case 2:
        return "4X";
    case 4:
        return "8X";
    case 8:
        return "12X";
    case 16:
        return "2X";
    default:
        return "unknown";
    }
}

/// The per-lane signalling rate for an `active_speed` code, e.g. "2.5 Gbps (SDR)",
/// "25.0 Gbps (EDR)", or "unknown".
/// @see ibv_query_port(3)
[[nodiscard]] constexpr std::string_view link_speed_name(std::uint8_t speed) noexcept {
    switch (speed) {
    case 1:
        return "2.5 Gbps (SDR)";
    case 2:
        return "5.0 Gbps (DDR)";
    case 4:
        return "10.0 Gbps (QDR)";
    case 8:
        return "10.0 Gbps (FDR10)";
    case 16:
        return "14.0 Gbps (FDR)";
    case 32:
        return "25.0 Gbps (EDR)";
    case 64:
        return "50.0 Gbps (HDR)";
    case 128:
        return "100.0 Gbps (NDR)";
    default:
        return "unknown";
    }
}

/// Attributes of one port, as ibv_query_port(3) reports them.
/// A value type; `native()` gives every field. Thread-safety: immutable.
class port_attributes {
public:
    /// Wraps attributes filled by ibv_query_port(3).
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
    /// The state as text: "down", "init", "armed", "active", …
    [[nodiscard]] std::string_view state_name() const noexcept { return rdmacxx::to_string(attr_.state); }
    /// The link layer as text: "InfiniBand", "Ethernet" or "unspecified".
    [[nodiscard]] std::string_view link_layer_name() const noexcept {
        return rdmacxx::link_layer_name(attr_.link_layer);
    }
    /// The active link width as text, e.g. "1X", "4X".
    [[nodiscard]] std::string_view width_name() const noexcept { return link_width_name(attr_.active_width); }
    /// The active per-lane speed as text, e.g. "2.5 Gbps (SDR)".
    [[nodiscard]] std::string_view speed_name() const noexcept { return link_speed_name(attr_.active_speed); }
    /// The active MTU in bytes (256 … 4096).
    [[nodiscard]] std::uint32_t active_mtu_bytes() const noexcept { return mtu_bytes(attr_.active_mtu); }
    /// The physical port state code (5 = LinkUp; see ibv_query_port(3)).
    [[nodiscard]] std::uint8_t phys_state() const noexcept { return attr_.phys_state; }
    /// Every field.
    [[nodiscard]] ibv_port_attr const& native() const noexcept { return attr_; }

private:
    ibv_port_attr attr_;
};

/// An open RDMA device (`ibv_context`). Owns the handle; move-only; closes it on destruction,
/// which must come after every object made from it is gone.
///
/// A context may move (into a `std::vector` that grows, out of a function) after protection
/// domains, CQs and end ports were made from it: they find it through a stable heap cell that
/// moves with it (`pd.context()`, `cq.context()` and `port.context()` name the context wherever
/// it is now). A moved-from context is empty: only destruction and assignment are valid on it.
/// Thread-safety: verbs contexts are thread-safe; so are these queries. Moving one is not.
/// @see ibv_open_device(3)
class context {
public:
    /// Takes ownership of an open `ibv_context`. When this throws, it has not taken it: the
    /// caller still owns (and closes) it — so a context librdmacm opened is never closed here.
    /// @throws std::bad_alloc when the context's stable cell cannot be allocated.
    explicit context(ibv_context* handle) : anchor_(this) { handle_.reset(handle); }
    /// Takes over `other`'s device and the objects made from it; `other` is left empty.
    context(context&& other) noexcept : handle_(std::move(other.handle_)), anchor_(std::move(other.anchor_), this) {}
    /// Closes the device held, as the destructor does, then takes over
    /// `other`'s; self-move is a no-op.
    context& operator=(context&& other) noexcept {
        if (this != &other) {
            handle_ = std::move(other.handle_);
            anchor_.take(std::move(other.anchor_), this);
        }
        return *this;
    }
    context(context const&) = delete;
    context& operator=(context const&) = delete;
    /// Closes the device (ibv_close_device(3)).
    ~context() = default;

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
            detail::throw_errno("ibv_query_gid", [&] {
                return "for GID index " + std::to_string(index) + " of port " + std::string{name()} + "/" +
                       std::to_string(port_num);
            });
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
            table.push_back({e.gid_index, g, static_cast<gid_type>(e.gid_type), e.ndev_ifindex, e.port_num});
        }
        return table;
    }

    /// The populated GID table entries of every port, read in one call (ibv_query_gid_table(3)),
    /// each with its port, index, type and network device; the order is the provider's.
    /// @throws sys_error naming the device when a port cannot be queried or
    ///         ibv_query_gid_table(3) fails.
    /// @see ibv_query_gid_table(3)
    [[nodiscard]] std::vector<gid_entry> gid_table() const {
        std::size_t slots = 0;
        for (unsigned p = 1, n = port_count(); p <= n; ++p)
            slots += static_cast<std::size_t>(query_port(static_cast<std::uint8_t>(p)).gid_table_length());
        std::vector<ibv_gid_entry> raw(slots);
        ssize_t const n = ::ibv_query_gid_table(handle_.get(), raw.data(), raw.size(), 0);
        if (n < 0) [[unlikely]]
            detail::throw_sys(static_cast<int>(-n), "ibv_query_gid_table",
                              "on " + std::string{name()} + " with room for " + std::to_string(slots) + " entries");
        std::vector<gid_entry> table;
        table.reserve(static_cast<std::size_t>(n));
        for (auto const& e : std::span{raw}.first(static_cast<std::size_t>(n)))
            table.push_back(
                {e.gid_index, rdmacxx::gid{e.gid}, static_cast<gid_type>(e.gid_type), e.ndev_ifindex, e.port_num});
        return table;
    }

    /// Picks the GID table entry connections from port `port_num` use, by the rules of
    /// `gid_selector` (by default: RoCE v2 before v1, routable before link-local, network device
    /// up before down, lowest index; index 0 on an InfiniBand port).
    /// @throws argument_error (std::errc::no_such_device_or_address) naming the port, what was
    ///         asked and the GID table when no entry fits; sys_error when the port cannot be
    ///         queried.
    /// @see ibv_query_gid_ex(3)
    [[nodiscard]] gid_entry select_gid(std::uint8_t port_num, gid_selector const& want = {}) const {
        auto const table = gid_table(port_num);
        gid_entry const* best = nullptr;
        if (want.index) {
            for (auto const& e : table)
                if (e.index == *want.index) best = &e;
        } else if (want.address) {
            for (auto const& e : table)
                if (e.gid == *want.address) best = &e;
        } else {
            bool const ib = !table.empty() && table.front().type == gid_type::ib && !want.type;
            auto score = [](gid_entry const& e) {
                int s = 0;
                if (e.type == gid_type::roce_v2) s += 4;
                if (!e.gid.is_link_local()) s += 2;
                if (e.netdev_up()) s += 1;
                return s;
            };
            int best_score = -1;
            for (auto const& e : table) {
                if (want.type && e.type != *want.type) continue;
                if (ib) {
                    if (e.index == 0) best = &e;
                    continue;
                }
                if (int const sc = score(e); sc > best_score) { // strict: the lowest index wins ties
                    best = &e;
                    best_score = sc;
                }
            }
        }
        if (best == nullptr) [[unlikely]]
            throw_no_gid(port_num, want, table);
        return *best;
    }

    /// The device's limits and capabilities, typed (atomics, RD-atomic depth, SGEs, CQ and QP
    /// sizes, ODP, timestamps, capability flags).
    /// @throws sys_error when ibv_query_device_ex(3) fails.
    /// @see ibv_query_device_ex(3)
    [[nodiscard]] device_limits limits() const { return device_limits{query_device()}; }

    /// The number of completion vectors (`ibv_context::num_comp_vectors`): a CQ's `comp_vector`
    /// is one of 0 … num_comp_vectors() - 1. Each is typically one interrupt, so CQs spread over
    /// them spread their event handling over cores.
    /// @see ibv_create_cq(3)
    [[nodiscard]] int num_comp_vectors() const noexcept { return handle_->num_comp_vectors; }

    /// The number of physical ports (ports are numbered 1 … port_count()).
    /// @throws sys_error when ibv_query_device(3) fails.
    [[nodiscard]] std::uint8_t port_count() const {
        ibv_device_attr attr{};
        if (int rc = ::ibv_query_device(handle_.get(), &attr); rc != 0) [[unlikely]]
            detail::throw_sys(rc, "ibv_query_device", "on " + std::string{name()});
        return attr.phys_port_cnt;
    }

    /// The P_Key table of port `port_num`, host byte order, one value per index
    /// (`pkey_table_length()` of them; 0 marks an empty slot). Index 0 usually holds 0xffff,
    /// the default full-membership P_Key.
    /// @throws sys_error when the port or an entry cannot be queried.
    /// @see ibv_query_pkey(3)
    [[nodiscard]] std::vector<std::uint16_t> pkey_table(std::uint8_t port_num) const {
        auto const port = query_port(port_num);
        std::vector<std::uint16_t> table;
        table.reserve(port.pkey_table_length());
        for (int i = 0; i < port.pkey_table_length(); ++i) {
            __be16 raw = 0;
            if (::ibv_query_pkey(handle_.get(), port_num, i, &raw) != 0) [[unlikely]]
                detail::throw_errno("ibv_query_pkey", [&] {
                    return "for P_Key index " + std::to_string(i) + " of port " + std::string{name()} + "/" +
                           std::to_string(port_num);
                });
            table.push_back(ntohs(raw));
        }
        return table;
    }

    /// The file descriptor of the context's asynchronous events (`async_fd`); see
    /// `async_event_queue` in async.hpp for reading it.
    [[nodiscard]] int async_fd() const noexcept { return handle_->async_fd; }

    /// The verbs handle.
    [[nodiscard]] ibv_context* native_handle() const noexcept { return handle_.get(); }

    /// @cond
    // The stable cell through which the objects made from this context find it.
    [[nodiscard]] detail::link<context> anchor_cell() const noexcept { return anchor_.cell(); }
    /// @endcond

private:
    RDMACXX_COLD [[noreturn]] void throw_no_gid(std::uint8_t port_num, gid_selector const& want,
                                                std::vector<gid_entry> const& table) const {
        std::string asked = "usable GID";
        if (want.index)
            asked = "GID index " + std::to_string(*want.index);
        else if (want.address)
            asked = "GID " + want.address->to_string();
        else if (want.type)
            asked = std::string{rdmacxx::to_string(*want.type)} + " GID";
        std::string have = table.empty() ? std::string{"its GID table is empty"} : std::string{"its GIDs:"};
        for (auto const& e : table)
            have += " " + e.to_string() + ";";
        if (!table.empty()) have.pop_back();
        throw argument_error("port " + std::string{name()} + "/" + std::to_string(port_num) + " has no " + asked +
                                 " (" + have + ")",
                             std::errc::no_such_device_or_address);
    }

    struct deleter {
        void operator()(ibv_context* c) const noexcept { (void)::ibv_close_device(c); }
    };
    std::unique_ptr<ibv_context, deleter> handle_;
    detail::anchor<context> anchor_; // made before the handle is taken: a failed allocation closes nothing
};

inline context device::open() const {
    ibv_context* const ctx = ::ibv_open_device(handle_);
    if (ctx == nullptr) [[unlikely]]
        detail::throw_errno("ibv_open_device", [&] { return "for device " + std::string{name()}; });
    try {
        return context{ctx};
    } catch (...) { // not taken: closed here
        (void)::ibv_close_device(ctx);
        throw;
    }
}

} // namespace v0
} // namespace rdmacxx
