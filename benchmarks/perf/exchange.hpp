#pragma once
// rdmacxx-perf's out-of-band channel: one TCP connection between the server and the client,
// as perftest has. It carries the setup message (test, sizes, the QP's endpoint and the
// buffer's remote span), barriers between sizes, and the counts that end a timed (-D) run.

#include "options.hpp"

#include "rdmacxx/rdmacxx.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace perf {

/// What each side tells the other before the QPs connect. Fixed size, big-endian, versioned.
struct setup_message {
    std::uint8_t test = 0;                  ///< index into test_names()
    std::uint8_t flags = 0;                 ///< bit 0: -b, bit 1: -D
    std::uint64_t max_size = 0;             ///< the largest message of the run
    std::uint64_t iterations = 0;           ///< -n (0 with -D)
    rdmacxx::endpoint endpoint;             ///< the QP's LID, QPN, PSN, GID, path MTU
    rdmacxx::remote_span<std::byte> buffer; ///< the peer may write, read and fetch-add here

    static constexpr std::size_t wire_size =
        24 + rdmacxx::endpoint::wire_size + rdmacxx::remote_span<std::byte>::wire_size;
};

/// The connected TCP socket of the out-of-band exchange. Move-only; closes on destruction.
class channel {
public:
    /// The server: listens on `port` (IPv4 and IPv6) and accepts one client, waiting at most
    /// `timeout_s`. The client: connects to `host`:`port`, retrying for `timeout_s` while the
    /// server starts. @throws std::runtime_error naming the host, port and reason.
    static channel open(std::optional<std::string> const& host, std::string const& port, int timeout_s);

    channel(channel&& other) noexcept;
    channel& operator=(channel&&) = delete;
    ~channel();

    /// Sends ours, receives theirs, and checks that both sides run the same test with the same
    /// sizes and iterations. @throws std::runtime_error when they differ or the peer is gone.
    setup_message swap(setup_message const& mine);

    /// Both sides wait here for each other, at most `timeout_s`.
    /// @throws std::runtime_error when the peer is gone or does not come in time.
    void barrier(int timeout_s = 600);

    /// Sends two numbers (a count and a time, say).
    void send_pair(std::uint64_t a, std::uint64_t b);
    /// Receives the two numbers the peer sent, waiting at most `timeout_s`.
    /// @throws std::runtime_error when the peer is gone or silent.
    std::pair<std::uint64_t, std::uint64_t> receive_pair(int timeout_s);
    /// The two numbers, when the peer has sent them already; never blocks.
    std::optional<std::pair<std::uint64_t, std::uint64_t>> try_receive_pair();

private:
    explicit channel(int fd) noexcept : fd_(fd) {}
    void send_all(void const* data, std::size_t n);
    void receive_all(void* data, std::size_t n, int timeout_s);
    int fd_;
};

} // namespace perf
