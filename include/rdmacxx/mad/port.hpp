#pragma once
/// @file
/// `mad::port`: a umad port (/dev/infiniband/umadN) opened from an end-port description, the
/// same grammar as `get_end_port`; `mad::address`, where a MAD goes (a port GID with a GRH, QP1
/// and its Q_Key); and the choice of the local GID a MAD to a given GID is sent from.

#include "rdmacxx/context.hpp"
#include "rdmacxx/detail/umad.hpp"
#include "rdmacxx/end_port.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"
#include "rdmacxx/mad/packet.hpp"
#include "rdmacxx/mad/types.hpp"

#include <arpa/inet.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace mad {

/// Where a MAD goes, or where a received one came from: the destination port's GID (sent in a
/// GRH, which RoCE needs), its QP (1, the GSI) and Q_Key, and the GRH's fields. A value type.
struct address {
    rdmacxx::gid gid;                       ///< the peer port's GID (in the GRH)
    std::uint32_t qpn = gsi_qpn;            ///< the peer's QP number: 1 for the GSI classes
    std::uint32_t q_key = gsi_qkey;         ///< the peer QP's Q_Key: 0x80010000 for QP1
    std::uint16_t lid = 0;                  ///< the peer's LID (0 on RoCE)
    std::uint8_t sl = 0;                    ///< the service level
    std::uint8_t hop_limit = 64;            ///< the GRH's hop limit
    std::uint8_t traffic_class = 0;         ///< the GRH's traffic class
    std::uint32_t flow_label = 0;           ///< the GRH's flow label (20 bits)
    std::uint16_t p_key_index = 0;          ///< the P_Key table index to send with
    std::optional<std::uint32_t> gid_index; ///< the local GID to send from; empty: `port::source_gid_for`
};

/// A MAD received by an agent: the bytes, how many came (a MAD is 256), where it came from
/// (reply to `from`), and the kernel's status for it (0, or ETIMEDOUT for a request of ours that
/// got no reply after its retries).
struct received_mad {
    packet mad;               ///< the MAD (zero past `length`)
    std::size_t length = 0;   ///< bytes received
    address from;             ///< the sender, as the kernel saw it
    int kernel_status = 0;    ///< umad_status(3): 0, or an errno
    std::uint32_t agent_id{}; ///< the agent it was delivered to
};

namespace detail {

/// What a `mad::port` and its agents share: the resolved end port, the umad descriptor, MADs
/// received for another agent than the one waiting, and the TransactionID counter.
struct mad_port_state {
    opened_end_port where;
    rdmacxx::detail::umad_fd fd;
    std::vector<gid_entry> gids;
    std::deque<received_mad> backlog;
    std::uint32_t next_tid = 0;
};

/// A buffer of one `ib_user_mad` (libibumad's header with the address) and a 256-byte MAD.
class umad_buffer {
public:
    umad_buffer() : bytes_(::umad_size() + mad_size) {}
    [[nodiscard]] void* get() noexcept { return bytes_.data(); }
    [[nodiscard]] std::byte* mad() noexcept { return static_cast<std::byte*>(::umad_get_mad(bytes_.data())); }
    [[nodiscard]] ib_mad_addr_t* addr() noexcept { return ::umad_get_mad_addr(bytes_.data()); }

private:
    std::vector<std::byte> bytes_;
};

/// Fills `buf`'s address from `to`, with a GRH sent from local GID index `gid_index` when `grh`
/// (always on RoCE, where a MAD without one is refused with EINVAL).
inline void set_address(umad_buffer& buf, address const& to, std::uint32_t gid_index, bool grh = true) {
    (void)::umad_set_addr(buf.get(), to.lid, static_cast<int>(to.qpn), to.sl, static_cast<int>(to.q_key));
    (void)::umad_set_pkey(buf.get(), to.p_key_index);
    ib_mad_addr_t* a = buf.addr();
    if (!grh) {
        a->grh_present = 0;
        return;
    }
    a->grh_present = 1;
    a->gid_index = static_cast<std::uint8_t>(gid_index);
    a->hop_limit = to.hop_limit;
    a->traffic_class = to.traffic_class;
    a->flow_label = htonl(to.flow_label);
    std::memcpy(a->gid, to.gid.bytes().data(), 16);
}

/// The address a received MAD came from, as libibumad reports it (network order fields).
[[nodiscard]] inline address address_of(ib_mad_addr_t const& a) {
    address from;
    std::array<std::uint8_t, 16> g{};
    std::memcpy(g.data(), a.gid, 16);
    from.gid = rdmacxx::gid{g};
    from.qpn = ntohl(a.qpn);
    from.q_key = gsi_qkey; // a received MAD's address carries no Q_Key: QP1's is the one to answer with
    from.lid = ntohs(a.lid);
    from.sl = a.sl;
    from.hop_limit = a.hop_limit != 0 ? a.hop_limit : std::uint8_t{64};
    from.traffic_class = a.traffic_class;
    from.flow_label = ntohl(a.flow_label);
    from.p_key_index = a.pkey_index;
    if (a.grh_present != 0) from.gid_index = a.gid_index;
    return from;
}

/// See `port::source_gid_for`.
[[nodiscard]] inline gid_entry source_gid_for(mad_port_state const& s, rdmacxx::gid const& destination) {
    for (auto const& e : s.gids) {
        if (destination.is_link_local() && e.gid.is_link_local()) return e;
        if (destination.is_ipv4_mapped() && e.gid.is_ipv4_mapped()) return e;
    }
    return s.where.gid();
}

/// See `port::gid_at`.
[[nodiscard]] inline gid_entry gid_at(mad_port_state const& s, std::uint32_t index) {
    std::string have;
    for (auto const& e : s.gids) {
        if (e.index == index) return e;
        have += ' '; // appended piece by piece: g++ 12 -O3 warns falsely (-Wrestrict) on " " + string
        have += e.to_string();
        have += ';';
    }
    throw argument_error("no GID index " + std::to_string(index) + " on " + s.where.to_string() + " (its GIDs:" + have +
                             ")",
                         std::errc::no_such_device_or_address);
}

} // namespace detail

/// A umad port: the kernel's MAD interface of one port of an RDMA device
/// (/dev/infiniband/umadN, root only on Debian), opened from an end-port description. Agents
/// (`mad::agent`) register on it. A handle: copies of a port and its agents share one state
/// (the descriptor, the TransactionID counter, the backlog), closed when the last of them goes,
/// so no order of destruction is wrong.
/// Thread-safety: one thread at a time per port and its agents.
/// @see umad_open_port(3), umad(4)
class port {
public:
    /// Opens the umad port of the end port `description` names ("rxe0/1", "rxe0", a port GID or
    /// GUID, "" for the first active port; `end_port_description`).
    /// @throws argument_error for a description that is malformed or names no port;
    ///         sys_error naming umad_open_port(3) and the port when the kernel refuses (ENODEV,
    ///         EINVAL when ib_umad is not loaded, EIO when the device file cannot be opened:
    ///         not root, or no /dev/infiniband/umadN).
    explicit port(std::string_view description = {}) : port(get_end_port(description)) {}

    /// Opens the umad port of an end port already resolved.
    /// @throws sys_error as above.
    explicit port(opened_end_port where) {
        std::string const dev{where.context().name()};
        std::uint8_t const num = where.port_num();
        std::vector<gid_entry> gids = where.context().gid_table(num);
        errno = 0;
        int const rc = ::umad_open_port(dev.c_str(), num);
        if (rc < 0) {
            // -EIO stands for a failed open(2), whose errno (EACCES, ENOENT) says more.
            int const err = rdmacxx::detail::umad_errno(rc, rc == -EIO ? errno : 0);
            throw sys_error(err, "umad_open_port",
                            "for " + where.to_string() +
                                " (is ib_umad loaded, /dev/infiniband/umad* there and readable by this user?)");
        }
        std::random_device seed;
        state_ = std::make_shared<detail::mad_port_state>(
            detail::mad_port_state{std::move(where), rdmacxx::detail::umad_fd{rc}, std::move(gids), {}, seed()});
    }

    /// "rxe0/1".
    [[nodiscard]] std::string to_string() const { return state_->where.to_string(); }
    /// The end port this port is on.
    [[nodiscard]] opened_end_port const& where() const noexcept { return state_->where; }
    /// The umad file descriptor (for poll(2); umad_get_fd(3)).
    [[nodiscard]] int fd() const noexcept { return state_->fd.get(); }

    /// The local GID a MAD to `destination` is sent from, one the kernel can match the reply
    /// to: for a link-local destination (`fe80::/10`) the port's first link-local GID, for an
    /// IPv4-mapped one its first IPv4-mapped GID, else the end port's chosen GID. (On Linux 6.1
    /// a reply to a MAD sent from an IPv4-mapped GID over RoCE v2 is dropped by the kernel's
    /// MAD layer, which matches the reply by the GID in the GRH slot where rxe puts the IPv4
    /// header: address peers by their link-local GIDs.)
    [[nodiscard]] gid_entry source_gid_for(rdmacxx::gid const& destination) const {
        return detail::source_gid_for(*state_, destination);
    }

    /// The GID table entry at `index` of this port.
    /// @throws argument_error (std::errc::no_such_device_or_address) listing the table when
    ///         there is none.
    [[nodiscard]] gid_entry gid_at(std::uint32_t index) const { return detail::gid_at(*state_, index); }

    /// The shared state, for the agents.
    [[nodiscard]] std::shared_ptr<detail::mad_port_state> const& state() const noexcept { return state_; }

private:
    std::shared_ptr<detail::mad_port_state> state_;
};

} // namespace mad
} // namespace v0
} // namespace rdmacxx
