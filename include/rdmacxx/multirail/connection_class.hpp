#pragma once
/// @file
/// The class of `multirail::connection` (its members are defined in
/// rdmacxx/multirail/connection.hpp, which includes this header: include that one): one connection between two
/// processes over one RC QP per rail (an RDMA device and port each), that stripes large RDMA WRITEs over the rails that
/// are up, sends messages exactly once and in order whatever rail carries them, takes a rail out of rotation on an
/// error completion or a port event (its work carried on the others) and rebuilds it on new QPs when its port is active
/// again. docs/multi-rail.md gives the semantics.

#include "rdmacxx/error.hpp"
#include "rdmacxx/multirail/rail.hpp"
#include "rdmacxx/multirail/window.hpp"
#include "rdmacxx/multirail/wire.hpp"
#include "rdmacxx/qp_settings.hpp"
#include "rdmacxx/wr.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace multirail {

/// Every rail of the connection is down: nothing can be carried, and no rail can be rebuilt by
/// itself, since a rebuild sends the new endpoints over a rail that is up. To recover once the
/// ports are active again: `renew()`, exchange `address()` out of band as for the first connect,
/// and `connect` again; what was not carried yet is carried then, exactly once. Its code is
/// `std::errc::network_down`.
class rails_down_error : public rdmacxx::error {
public:
    explicit rails_down_error(std::string message)
        : error(std::make_error_code(std::errc::network_down), std::move(message)) {}
};

/// How an operation goes to the rails.
enum class placement_kind : std::uint8_t {
    stripe,      ///< a WRITE cut into `chunk_bytes` chunks spread over the rails that are up
    round_robin, ///< each whole operation on the next rail that is up
    pin,         ///< on one chosen rail while it is up (on another when it is down)
};
/// How an operation goes to the rails: `placement::stripe()`, `round_robin()` or `pin(r)`.
struct placement {
    placement_kind kind = placement_kind::stripe;
    std::uint32_t rail = 0; ///< pin: the rail
    [[nodiscard]] static constexpr placement stripe() noexcept { return {placement_kind::stripe, 0}; }
    [[nodiscard]] static constexpr placement round_robin() noexcept { return {placement_kind::round_robin, 0}; }
    [[nodiscard]] static constexpr placement pin(std::uint32_t r) noexcept { return {placement_kind::pin, r}; }
};

/// What a multi-rail connection is made with.
struct connection_options {
    /// The settings of every rail's QP (the one vocabulary: qp_settings.hpp); by default the
    /// peer may WRITE and READ registered memory, and a dead rail is found within
    /// `dead_peer_bound` (about 470 ms).
    qp_settings settings{.remote_access = access::remote_write | access::remote_read};
    std::size_t chunk_bytes = std::size_t{256} * 1024; ///< stripe unit of a WRITE, in bytes
    std::uint32_t window = 64;                         ///< messages in flight (numbered, not acknowledged)
    std::uint32_t message_bytes = 4096;                ///< largest payload of a message, in bytes (64 … 1 MiB)
    std::uint32_t send_depth = 256;                    ///< send-queue requests per rail QP
    /// While a rail is down and its port active, the leader tries to rebuild it this often (a
    /// fault that raised no port event), and the follower asks it to.
    std::chrono::milliseconds rebuild_retry{2000};
    /// A rebuild not finished in this time is given up and tried again.
    std::chrono::milliseconds rebuild_timeout{5000};
};

/// What `connection::poll` reports.
struct event {
    enum class kind : std::uint8_t {
        write_done,   ///< a WRITE of this side completed whole (`id`)
        write_failed, ///< a WRITE of this side the peer refused (`id`, `reason`: its completion's status, e.g.
                      ///< IBV_WC_REM_ACCESS_ERR for a bad rkey); not carried again
        message, ///< a message from the peer (`id` its number: increasing, not by one, control messages are numbered
                 ///< too; `imm`, `data`)
        write_arrived, ///< a WRITE of the peer arrived whole (`id` its id there, `bytes`, `imm`)
        rail_down,     ///< `rail` went down (`reason`)
        rail_up,       ///< `rail` is up again on new QPs
    };
    kind what = kind::write_done;
    std::uint64_t id = 0;
    std::uint32_t rail = 0;
    std::uint32_t imm = 0;
    std::size_t bytes = 0;
    std::span<std::byte const> data{}; ///< message: its payload, valid until the next `poll`
    std::error_code reason{};          ///< rail_down: the failed completion's code, or network_down for a port event;
                                       ///< write_failed: the refusal
};

/// One connection over several rails. Made with its rails (each opened, with a PD, a CQ, async
/// events, receive buffers and an RC QP), connected with the peer's `address()` (exchanged out of
/// band, e.g. through a bootstrap's allgather), then driven by `poll`, which does everything:
/// completions, async events, failover, rebuilds, acknowledgements.
///
/// - `write` puts bytes of a `region` into the peer's `remote_region`, striped (chunks spread over
///   the rails that are up, in any order) or whole on one rail; `write_done` when every chunk
///   has completed; with `notify`, the peer gets `write_arrived` (exactly once, in order with the
///   messages) after the whole WRITE has landed.
/// - `send` copies a message (up to `message_bytes`) and delivers it to the peer exactly once,
///   in the order sent, whatever rails carried it and whatever failed on the way.
/// - A rail goes down on a failed completion (after the QP's retries: `dead_peer_bound` by
///   default) or its port's `IBV_EVENT_PORT_ERR`; its QP is moved to ERR and every request on it
///   is carried on the rails still up (WRITEs again, messages again: the receiver drops what it
///   has had). When its port is active again the leader (the larger nonce) makes a new QP, sends
///   its endpoint over a rail that is up, the follower answers with its own, both connect, and
///   the rail carries work again.
/// - Every rail down: `poll`, `write` and `send` throw `rails_down_error`, and keep throwing it
///   until the connection is renewed and connected again through the out-of-band exchange
///   (`renew`, `address`, `connect`): it cannot rebuild a rail without another one to send the
///   endpoints over. Numbered messages and WRITE chunks not carried are kept and carried then.
///
/// Both sides must have called `connect` before either polls (a barrier of the out-of-band
/// exchange between `connect` and the first `poll`, `write` or `send`): a request that reaches a
/// peer whose QP is not connected yet is lost and retried, and after the QP's retries
/// (`dead_peer_bound`) its rail goes down.
///
/// A completion that fails because of the request itself (a remote access, protection or length
/// error) is not a rail's fault: the WRITE it belongs to fails (`write_failed`) and is not carried
/// again, while its rail, whose QP the error moved to ERR, is rebuilt as any other.
///
/// Ownership: the connection owns its rails and their QPs (destroyed with it); a `region` shares
/// a rail's device, PD and CQ and may outlive it. Neither copied nor moved (hold it in a
/// `std::unique_ptr` to move it). Thread-safety: one thread at a time.
/// @see ibv_post_send(3), ibv_poll_cq(3), ibv_get_async_event(3)
class connection {
public:
    /// Opens `rails` (1 to `max_rails`) and makes each its resources and QP.
    /// @throws argument_error for no rail, too many, a window or message size of 0; what opening
    ///         a device, making a PD, CQ, QP or registering the buffers throws.
    explicit connection(std::vector<rail_spec> const& rails, connection_options opt = {});
    connection(connection&&) = delete;
    connection& operator=(connection&&) = delete;
    connection(connection const&) = delete;
    connection& operator=(connection const&) = delete;
    /// Destroys every rail's QPs (the peer's requests to them then fail, and its rails go down).
    ~connection();

    /// What the peer needs to connect (`rail_address`'s encoding): this side's nonce, window and
    /// message size, and every rail's endpoint.
    [[nodiscard]] std::vector<std::byte> address() const;
    /// Connects every rail to the peer's (`peer`: its `address()`), posts the receives, and
    /// decides who leads rebuilds. A rail that cannot be connected now (its path down: RTR
    /// fails) starts down (a `rail_down` event) and is rebuilt once its ports are active. Again after `renew()`: the
    /// same, and what waited is carried at the next `poll` (after the barrier: see the class).
    /// @throws argument_error for an address that does not decode, another number of rails,
    ///         another window or message size, the same nonce; what `queue_pair::connect` throws
    ///         for the first rail when no rail could be connected.
    void connect(std::span<std::byte const> peer);

    /// Makes every rail a new QP (the old ones go to ERR; their requests come back flushed and
    /// wait for a rail), after every rail went down: then `address()` names the new QPs, to be
    /// exchanged out of band, and `connect` brings the rails up again. The messages and WRITEs
    /// not carried yet are kept.
    /// @throws sys_error when a QP cannot be made or a port queried.
    void renew();
    /// Whether rail `r`'s port is active now (ibv_query_port(3)).
    [[nodiscard]] bool port_active(std::size_t r) const {
        return rails_.at(r)->ctx.query_port(rails_.at(r)->spec_.port).active();
    }

    /// Registers `memory` on every rail.
    [[nodiscard]] region register_memory(std::span<std::byte> memory, access rights) const {
        return region{rails_, memory, rights};
    }

    /// Writes `length` bytes at `offset` of `src` to `dst_offset` of `dst`, as `how` says;
    /// `write_done` with the returned id once every chunk has completed. The source must stay
    /// registered and untouched until then (the `region` object itself may move). With `notify`, the peer gets
    /// `write_arrived` with this id, the length and `*notify` once the whole WRITE has landed.
    /// @throws argument_error (nothing posted) for an empty or out-of-range span, a region or
    ///         remote region of another number of rails, a pin to no rail; rails_down_error.
    std::uint64_t write(region const& src, std::size_t offset, std::size_t length, remote_region const& dst,
                        std::size_t dst_offset, placement how = placement::stripe(),
                        std::optional<std::uint32_t> notify = std::nullopt);
    /// Sends `payload` (copied) with `imm`, as `how` says (stripe means round robin here); false
    /// when the window is full (nothing sent: poll, then try again).
    /// @throws argument_error for a payload over `message_bytes` or a pin to no rail; rails_down_error.
    bool send(std::span<std::byte const> payload, std::uint32_t imm = 0, placement how = placement::round_robin());

    /// Makes progress and hands out up to `out.size()` events; how many.
    /// @throws rails_down_error when every rail is down and no event is left to hand out;
    ///         argument_error for a corrupt message or a peer that breaks the protocol (the
    ///         connection is unusable then: every later call throws it again).
    std::size_t poll(std::span<event> out);

    /// Rails.
    [[nodiscard]] std::size_t rails() const noexcept { return rails_.size(); }
    /// Rail `r`'s state.
    [[nodiscard]] rail_state state(std::size_t r) const { return rails_.at(r)->state; }
    /// Rail `r`'s counters.
    [[nodiscard]] rail_counters const& counters(std::size_t r) const { return rails_.at(r)->counters; }
    /// Rail `r`'s device.
    [[nodiscard]] std::string const& device(std::size_t r) const { return rails_.at(r)->spec_.device; }
    /// How many times rail `r`'s QP has been made anew.
    [[nodiscard]] std::uint16_t generation(std::size_t r) const { return rails_.at(r)->generation; }
    /// Whether this side leads the rebuilds (after `connect`).
    [[nodiscard]] bool leader() const noexcept { return leader_; }
    /// WRITEs not completed yet.
    [[nodiscard]] std::size_t writes_in_flight() const noexcept { return writes_.size(); }
    /// Messages not acknowledged yet (control messages included).
    [[nodiscard]] std::size_t messages_in_flight() const noexcept { return window_.in_flight(); }
    /// Rails up now.
    [[nodiscard]] std::size_t rails_up() const noexcept;
    /// Duplicates the receiver dropped (messages carried twice after a failure).
    [[nodiscard]] std::uint64_t duplicates() const noexcept { return duplicates_; }

private:
    enum wr_kind : std::uint8_t { chunk_wr = 1, message_wr = 2, recv_wr = 3, ack_wr = 4 };
    struct chunk {
        std::uint64_t write = 0;
        std::size_t src_offset = 0, dst_offset = 0, length = 0;
        int pin = -1;          // the rail it must go on while that rail is up
        int rail = -1;         // where it is posted now (-1: waiting, or not posted)
        std::uint16_t gen = 0; // the generation of the QP it is posted on
        bool live = false;
        bool cancelled = false; // its WRITE failed: freed once it is not posted any more
    };
    // A control message's step, applied once every CQ has been reaped (a step that makes a new
    // QP must not run while completions of the old one are being handled).
    struct step {
        message_kind kind;
        std::size_t rail;
        std::uint16_t rebuild;
        std::optional<endpoint> peer;
    };
    struct write_op {
        std::vector<local_span<std::byte const>> src; // the source on each rail (the region may move)
        remote_region dst;
        std::size_t length = 0;
        std::uint32_t left = 0;
        std::optional<std::uint32_t> notify;
        std::vector<std::uint32_t> chunks;
    };
    static constexpr std::uint32_t ack_slots = 8;
    static constexpr std::size_t max_whole = std::size_t{1} << 30; // a WRITE not striped: chunks of 1 GiB

    [[nodiscard]] static std::uint64_t tag(wr_kind k, std::size_t rail, std::uint16_t gen,
                                           std::uint32_t index) noexcept {
        return (std::uint64_t{k} << 56) | (std::uint64_t{rail} << 48) | (std::uint64_t{gen} << 32) | index;
    }
    [[nodiscard]] std::size_t slot_bytes() const noexcept { return message_header::wire_size + opt_.message_bytes; }
    [[nodiscard]] int pick(int pin, bool for_send);
    detail::rail_qp* qp_of(detail::rail& r, std::uint16_t gen);
    void new_qp(detail::rail& r);
    void post_receives(std::size_t rail);
    void drain_events(std::size_t rail);
    void reap(std::size_t rail);
    void on_completion(std::size_t rail, work_completion const& wc);
    void on_arrival(std::size_t rail, std::uint32_t slot, std::uint32_t bytes);
    void deliver();
    void on_control(message_header const& h, std::span<std::byte const> payload);
    void rail_down(std::size_t rail, std::error_code why);
    void start_rebuild(std::size_t rail);
    void on_port_active(std::size_t rail);
    void tick();
    void post_pending();
    void post_ack(bool force);
    void control(message_kind kind, std::size_t rail, std::span<std::byte const> payload = {}, std::uint32_t imm = 0);
    void flush_backlog();
    void send_endpoint(message_kind kind, std::size_t rail);
    void throw_if_all_down(char const* what) const;
    void apply_steps();
    void take_down_qp(std::size_t rail);
    void abandon(std::size_t rail);
    void fail_write(std::uint64_t id, std::error_code why);
    void free_chunk(std::uint32_t i);
    void post_recv_slot(std::size_t rail, std::uint32_t slot);
    void broken(std::string const& why);
    [[nodiscard]] static bool refused(ibv_wc_status status) noexcept;

    connection_options opt_;
    std::vector<std::shared_ptr<detail::rail>> rails_;
    std::uint64_t nonce_ = 0;
    std::vector<endpoint> peer_;
    bool leader_ = false;
    bool connected_ = false;
    std::uint32_t epoch_ = 0;              // connects so far: control messages of an older one are dropped
    bool renewed_ = false;                 // renew() was called and connect not yet: no rebuild meanwhile
    std::optional<rdmacxx::error> broken_; // the protocol failed: every call throws it
    std::deque<step> steps_;
    // Message buffers: the sender's slots and the acknowledgements, registered on every rail.
    std::vector<std::byte> send_bytes_;
    std::optional<region> send_region_;
    std::vector<std::byte> ack_bytes_;
    std::optional<region> ack_region_;
    std::vector<int> ack_rail_; // -1: free
    detail::send_window window_;
    detail::receive_window received_;
    struct control_message {
        message_kind kind;
        std::uint8_t rail;
        std::uint32_t imm;
        std::vector<std::byte> payload;
    };
    std::deque<control_message> control_backlog_; // control messages waiting for room
    std::vector<std::uint64_t> handed_out_;       // messages handed out by the last poll
    std::uint64_t ack_sent_ = 0;
    std::chrono::steady_clock::time_point ack_time_{};
    // WRITEs
    std::uint64_t next_write_ = 1;
    std::unordered_map<std::uint64_t, write_op> writes_;
    std::vector<chunk> chunks_;
    std::vector<std::uint32_t> free_chunks_;
    std::deque<std::uint32_t> waiting_chunks_;
    std::deque<event> events_;
    std::size_t cursor_ = 0;
    std::uint64_t duplicates_ = 0;
};

} // namespace multirail
} // namespace v0
} // namespace rdmacxx
