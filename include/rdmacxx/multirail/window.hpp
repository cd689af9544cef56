#pragma once
/// @file
/// Internals of a multi-rail connection: the two halves of its exactly-once message stream. The
/// sender's window numbers each message (1, 2, …), keeps it until the peer acknowledges it, and
/// says which to post again when the rail that carried it went down; the receiver's window puts
/// what arrives back in order, drops what it has had already, and says how far it has released
/// (the cumulative acknowledgement). Thread-safety: the connection's.

#include "rdmacxx/multirail/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <span>
#include <vector>

namespace rdmacxx {
inline namespace v0 {
namespace multirail::detail {

/// The sender's side: `slots` messages at most between the oldest not acknowledged and the
/// newest. Slot `seq % slots` holds message `seq` (its header and payload are written by the
/// connection into its send buffer); a message is posted, completes or fails on a rail, and is
/// freed once acknowledged and not on any rail.
class send_window {
public:
    enum class state : std::uint8_t { free, waiting, posted, sent };
    struct slot {
        std::uint64_t seq = 0;
        state st = state::free;
        message_kind kind = message_kind::data;
        std::uint32_t length = 0;
        std::uint32_t imm = 0;
        std::uint8_t control_rail = 0; ///< the rail a control message is about
        int pin = -1;                  ///< the rail it must go on while that rail is up (-1: any)
        int rail = -1;                 ///< where it is posted now
        std::uint16_t gen = 0;         ///< the generation of the QP it is posted on
        bool acked = false;
    };

    explicit send_window(std::uint32_t slots) : slots_(slots) {}

    /// Whether a new message fits.
    [[nodiscard]] bool has_room() const noexcept {
        // The slot must be free too: a message acknowledged may still be posted again on a rail,
        // and its buffer is the device's until that completes.
        return next_ - acked_ <= slots_.size() && slots_[index(next_)].st == state::free;
    }
    /// Messages numbered and not yet acknowledged.
    [[nodiscard]] std::size_t in_flight() const noexcept { return static_cast<std::size_t>(next_ - 1 - acked_); }
    /// Numbers a new message (has_room() must hold) and returns its slot, waiting to be posted.
    std::uint32_t push(message_kind kind, std::uint32_t length, std::uint32_t imm, std::uint8_t control_rail, int pin) {
        std::uint64_t const seq = next_++;
        auto const i = index(seq);
        slots_[i] = slot{seq, state::waiting, kind, length, imm, control_rail, pin, -1, 0, false};
        waiting_.insert(seq);
        return i;
    }
    /// Slot `i`.
    [[nodiscard]] slot& operator[](std::uint32_t i) noexcept { return slots_[i]; }
    /// The slot of message `seq`.
    [[nodiscard]] std::uint32_t index(std::uint64_t seq) const noexcept {
        return static_cast<std::uint32_t>(seq % slots_.size());
    }
    /// Slots in the window.
    [[nodiscard]] std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(slots_.size()); }
    /// The messages waiting to be posted, oldest first.
    [[nodiscard]] std::set<std::uint64_t> const& waiting() const noexcept { return waiting_; }

    /// Message of slot `i` posted on `rail`'s QP of generation `gen`.
    void posted(std::uint32_t i, int rail, std::uint16_t gen) {
        slots_[i].st = state::posted;
        slots_[i].rail = rail;
        slots_[i].gen = gen;
        waiting_.erase(slots_[i].seq);
    }
    /// Whether a completion of `rail`'s QP of generation `gen` is the posting of slot `i` now (a
    /// late one of an earlier posting is not).
    [[nodiscard]] bool posted_on(std::uint32_t i, int rail, std::uint16_t gen) const noexcept {
        return slots_[i].st == state::posted && slots_[i].rail == rail && slots_[i].gen == gen;
    }
    /// Its SEND completed: the peer has it. Freed when acknowledged too.
    void completed(std::uint32_t i) {
        slots_[i].st = state::sent;
        slots_[i].rail = -1;
        free_if_done(i);
    }
    /// Its SEND failed or was flushed: posted again (on another rail) unless acknowledged.
    void failed(std::uint32_t i) {
        slot& s = slots_[i];
        s.rail = -1;
        if (s.acked) {
            s.st = state::free;
            return;
        }
        s.st = state::waiting;
        waiting_.insert(s.seq);
    }
    /// The peer acknowledged every message up to `ack`; false (nothing done) for one beyond what
    /// was numbered, which no peer that keeps the protocol sends.
    [[nodiscard]] bool acknowledge(std::uint64_t ack) {
        if (ack >= next_) return false;
        for (; acked_ < ack; ++acked_) {
            auto const i = index(acked_ + 1);
            slot& s = slots_[i];
            s.acked = true;
            waiting_.erase(s.seq);
            free_if_done(i);
        }
        return true;
    }
    /// Every message up to this one is acknowledged.
    [[nodiscard]] std::uint64_t acknowledged() const noexcept { return acked_; }

private:
    void free_if_done(std::uint32_t i) {
        slot& s = slots_[i];
        if (s.acked && s.st != state::posted) s.st = state::free;
    }
    std::vector<slot> slots_;
    std::uint64_t next_ = 1;  // the next message's number
    std::uint64_t acked_ = 0; // acknowledged up to here
    std::set<std::uint64_t> waiting_;
};

/// The receiver's side: messages `released() + 1` … `released() + slots` are accepted (the
/// sender's window guarantees no other new one comes), each copied into its slot; they are
/// handed over in order; a slot is released once the connection is done with its message.
class receive_window {
public:
    /// What became of an arrival.
    enum class arrival { accepted, duplicate, out_of_window };

    receive_window(std::uint32_t slots, std::size_t payload_bytes)
        : held_(slots), headers_(slots), bytes_(static_cast<std::size_t>(slots) * payload_bytes),
          payload_bytes_(payload_bytes) {}

    /// Takes message `h` with `payload` (no more than the slot's bytes).
    arrival take(message_header const& h, std::span<std::byte const> payload) {
        if (h.seq <= released_) return arrival::duplicate;
        if (h.seq > released_ + held_.size()) return arrival::out_of_window;
        auto const i = index(h.seq);
        if (held_[i] != 0 || h.seq < next_) return arrival::duplicate; // had already
        held_[i] = 1;
        headers_[i] = h;
        if (!payload.empty()) std::memcpy(bytes_.data() + i * payload_bytes_, payload.data(), payload.size());
        return arrival::accepted;
    }
    /// The next message in order, when it has arrived: its header (its payload is `payload(seq)`).
    [[nodiscard]] std::optional<message_header> next() const {
        auto const i = index(next_);
        if (held_[i] == 0 || headers_[i].seq != next_) return std::nullopt;
        return headers_[i];
    }
    /// The next message is handed over (its slot stays until `release`).
    void advance() noexcept {
        held_[index(next_)] = 2;
        ++next_;
    }
    /// The payload of message `seq` (held or handed over, not released).
    [[nodiscard]] std::span<std::byte const> payload(std::uint64_t seq) const {
        auto const i = index(seq);
        return {bytes_.data() + i * payload_bytes_, headers_[i].length};
    }
    /// The connection is done with message `seq` (handed over).
    void release(std::uint64_t seq) noexcept {
        held_[index(seq)] = 0;
        while (released_ + 1 < next_ && held_[index(released_ + 1)] == 0)
            ++released_;
    }
    /// Messages up to this one are released: the cumulative acknowledgement.
    [[nodiscard]] std::uint64_t released() const noexcept { return released_; }

private:
    [[nodiscard]] std::uint32_t index(std::uint64_t seq) const noexcept {
        return static_cast<std::uint32_t>(seq % held_.size());
    }
    std::vector<std::uint8_t> held_; // 0 empty, 1 arrived, 2 handed over
    std::vector<message_header> headers_;
    std::vector<std::byte> bytes_;
    std::size_t payload_bytes_;
    std::uint64_t next_ = 1;     // the next to hand over
    std::uint64_t released_ = 0; // released up to here
};

} // namespace multirail::detail
} // namespace v0
} // namespace rdmacxx
