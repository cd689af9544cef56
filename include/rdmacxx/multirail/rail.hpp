#pragma once
/// @file
/// One rail of a multi-rail connection: an opened RDMA device and port, its protection domain,
/// CQ, async events and receive buffers, the RC QP that carries the rail now and the retired
/// ones whose flushed completions are still to be reaped, its state and counters; and `region`,
/// memory registered on every rail.

#include "rdmacxx/async.hpp"
#include "rdmacxx/context.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/device.hpp"
#include "rdmacxx/end_port.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/memory.hpp"
#include "rdmacxx/multirail/wire.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/qp.hpp"
#include "rdmacxx/transport.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace multirail {

/// Which device and port a rail uses.
struct rail_spec {
    std::string device;    ///< the RDMA device, e.g. "rxe1" (`device_list::find`)
    std::uint8_t port = 1; ///< its port
};

/// The rails of a list such as "mlx5_0,mlx5_1/2" (or tools/softroce's RDMACXX_DEVICES):
/// comma-separated devices, each with `/PORT` (1 to 255) or port 1; empty entries are skipped.
/// @throws argument_error for no rail, more than `max_rails`, or a port that is not a number from
///         1 to 255.
[[nodiscard]] inline std::vector<rail_spec> parse_rails(std::string_view list) {
    std::vector<rail_spec> out;
    while (!list.empty()) {
        std::size_t const comma = list.find(',');
        std::string_view item = list.substr(0, comma);
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
        if (item.empty()) continue;
        rail_spec r;
        if (std::size_t const slash = item.find('/'); slash != std::string_view::npos) {
            std::string_view const port = item.substr(slash + 1);
            unsigned value = 0;
            bool ok = !port.empty() && port.size() <= 3;
            for (char c : port) {
                ok = ok && c >= '0' && c <= '9';
                value = value * 10 + static_cast<unsigned>(c - '0');
            }
            if (!ok || value == 0 || value > 255) [[unlikely]]
                detail::throw_argument("multirail::parse_rails: the port of \"" + std::string{item} +
                                       "\" is not a number from 1 to 255");
            r.port = static_cast<std::uint8_t>(value);
            item = item.substr(0, slash);
        }
        r.device = std::string{item};
        out.push_back(std::move(r));
    }
    if (out.empty() || out.size() > max_rails) [[unlikely]]
        detail::throw_argument("multirail::parse_rails: " + std::to_string(out.size()) + " rails (1 to " +
                               std::to_string(max_rails) + ")");
    return out;
}

/// A rail's state. `up`: it carries work. `down`: an error completion or a port event took it
/// out of rotation; its work was carried on the others. `rebuilding`: new QPs are being
/// connected on both sides (the endpoints crossing over another rail).
enum class rail_state : std::uint8_t { up, down, rebuilding };

/// What a rail has carried and suffered, since the connection was made.
struct rail_counters {
    std::uint64_t bytes = 0;      ///< payload bytes of the requests completed on it (WRITE chunks, messages)
    std::uint64_t operations = 0; ///< its send-queue requests that completed successfully
    std::uint64_t failures = 0;   ///< times it went down
    std::uint64_t rebuilds = 0;   ///< times it came up again on new QPs
};

namespace detail {

using rail_qp_type = queue_pair<rc, busy_poll>;

/// One QP of a rail and what is outstanding on it (its completions name its generation).
struct rail_qp {
    std::unique_ptr<rail_qp_type> qp;
    std::uint16_t generation = 0;
    std::uint32_t outstanding = 0; ///< send- and receive-queue requests not completed yet
    std::uint32_t sends = 0;       ///< of which send-queue requests
    bool connected = false;        ///< moved to RTR: receives posted on it can take messages
};

/// A rail's resources. Members are destroyed in reverse order: the QPs before the receive
/// region, the CQ, the async queue, the PD and the context.
struct rail {
    rail(rail_spec const& spec, std::uint32_t receive_slots, std::size_t slot_bytes, int cq_entries)
        : spec_(spec), ctx(device_list{}.find(spec.device).open()), port(std::in_place, ctx, spec.port), pd(ctx),
          cq(ctx, cq_entries), events(ctx), recv_bytes(receive_slots * slot_bytes),
          recv_mr(pd.register_memory(std::span{recv_bytes}, access::local_write)), slots(receive_slots),
          slot_size(slot_bytes), slot_on(receive_slots, -1) {}
    rail(rail const&) = delete;
    rail& operator=(rail const&) = delete;
    rail(rail&&) = delete;
    rail& operator=(rail&&) = delete;
    ~rail() = default;

    rail_spec spec_;
    context ctx;
    std::optional<end_port> port; // re-made when the rail is rebuilt (its GID re-queried)
    protection_domain pd;
    completion_queue<busy_poll> cq;
    async_event_queue events;
    std::vector<std::byte> recv_bytes;
    memory_region recv_mr;
    std::uint32_t slots;
    std::size_t slot_size;
    rail_state state = rail_state::down; // up once connected
    rail_counters counters;
    std::uint16_t generation = 0; ///< this side's count of its QPs (in the wr_id of their requests)
    std::uint16_t rebuild = 0;    ///< the rebuild under way, as the leader numbers it
    std::uint16_t ignored = 0;    ///< follower: the last request it could not take (its port down)
    std::chrono::steady_clock::time_point down_at{};
    std::chrono::steady_clock::time_point rebuild_started{};
    std::error_code reason{}; ///< why it went down last
    bool dead = false;        ///< its CQ or device failed: never rebuilt
    std::vector<int> slot_on; ///< per receive buffer, the generation of the QP it is posted on, or -1
    rail_qp current;
    std::vector<rail_qp> retired; ///< QPs taken out of service whose completions are still to come
};

} // namespace detail

/// Memory registered on every rail of a connection (each device has its own protection domain
/// and keys): `local(rail)` is the region of that rail, `remote()` what a peer needs to write
/// into it or read it on any rail. Made by `connection::register_memory`; it keeps the rails'
/// devices, PDs and CQs alive (shared), so it may outlive its connection. Movable, not assignable.
/// @see ibv_reg_mr(3)
class region {
public:
    /// Registers `memory` with `rights` on every rail of `rails`.
    /// @throws sys_error when ibv_reg_mr(3) fails on a rail (nothing stays registered).
    region(std::vector<std::shared_ptr<detail::rail>> rails, std::span<std::byte> memory, access rights)
        : rails_(std::move(rails)), memory_(memory) {
        for (auto const& r : rails_)
            mrs_.push_back(r->pd.register_memory(memory, rights));
    }
    region(region&&) noexcept = default;
    /// Not assignable: the registrations would go after the rails they belong to.
    region& operator=(region&&) = delete;
    region(region const&) = delete;
    region& operator=(region const&) = delete;
    ~region() = default;

    /// The memory.
    [[nodiscard]] std::span<std::byte> bytes() const noexcept { return memory_; }
    /// Whether it is registered on these rails (of one connection).
    [[nodiscard]] bool on(std::vector<std::shared_ptr<detail::rail>> const& rails) const noexcept {
        return rails_ == rails;
    }
    /// Its size in bytes.
    [[nodiscard]] std::size_t size() const noexcept { return memory_.size(); }
    /// The registration on rail `r`.
    [[nodiscard]] memory_region const& local(std::size_t r) const { return mrs_.at(r); }
    /// Rails it is registered on.
    [[nodiscard]] std::size_t rails() const noexcept { return mrs_.size(); }
    /// The peer's view: address, length, one rkey per rail.
    [[nodiscard]] remote_region remote() const {
        remote_region out{reinterpret_cast<std::uintptr_t>(memory_.data()), memory_.size(), {}};
        for (auto const& mr : mrs_)
            out.rkeys.push_back(mr.rkey());
        return out;
    }

private:
    std::vector<std::shared_ptr<detail::rail>> rails_; // first: the regions below go before their PDs
    std::span<std::byte> memory_;
    std::vector<memory_region> mrs_;
};

} // namespace multirail
} // namespace v0
} // namespace rdmacxx
