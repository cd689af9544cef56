// rdmacxx-perf's out-of-band TCP channel (see exchange.hpp).

#include "exchange.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>

namespace perf {
namespace {

constexpr std::array<char, 4> magic{'R', 'X', 'P', 'F'};
constexpr std::uint8_t version = 1;

void put(std::byte* at, std::uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i, v >>= 8)
        at[i] = static_cast<std::byte>(v & 0xff);
}
std::uint64_t get(std::byte const* at, int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i)
        v = (v << 8) | std::to_integer<std::uint64_t>(at[i]);
    return v;
}

std::runtime_error failure(std::string const& what) { return std::runtime_error("out-of-band exchange: " + what); }

} // namespace

channel channel::open(std::optional<std::string> const& host, std::string const& port, int timeout_s) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_family = host ? AF_UNSPEC : AF_INET6;
    if (!host) hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(host ? host->c_str() : nullptr, port.c_str(), &hints, &res); rc != 0)
        throw failure("cannot resolve " + host.value_or("the local address") + " port " + port + ": " +
                      ::gai_strerror(rc));
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds{timeout_s};
    int fd = -1;
    if (host) {
        while (fd < 0) {
            for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
                fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
                if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
                    ::close(fd);
                    fd = -1;
                }
            }
            if (fd >= 0) break;
            if (std::chrono::steady_clock::now() > deadline) {
                ::freeaddrinfo(res);
                throw failure("cannot connect to " + *host + " port " + port + " within " + std::to_string(timeout_s) +
                              " s: " + std::strerror(errno));
            }
            std::this_thread::sleep_for(std::chrono::milliseconds{100});
        }
    } else {
        int const lfd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
        int one = 1, zero = 0;
        if (lfd >= 0) {
            (void)::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            (void)::setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        }
        if (lfd < 0 || ::bind(lfd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(lfd, 1) != 0) {
            std::string const why = std::strerror(errno);
            if (lfd >= 0) ::close(lfd);
            ::freeaddrinfo(res);
            throw failure("cannot listen on port " + port + ": " + why);
        }
        pollfd p{lfd, POLLIN, 0};
        int const ready = ::poll(&p, 1, timeout_s * 1000);
        fd = ready == 1 ? ::accept(lfd, nullptr, nullptr) : -1;
        ::close(lfd);
        if (fd < 0) {
            ::freeaddrinfo(res);
            throw failure("no client connected to port " + port + " within " + std::to_string(timeout_s) + " s");
        }
    }
    ::freeaddrinfo(res);
    return channel{fd};
}

channel::channel(channel&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
channel::~channel() {
    if (fd_ >= 0) ::close(fd_);
}

void channel::send_all(void const* data, std::size_t n) {
    auto const* p = static_cast<char const*>(data);
    while (n > 0) {
        ssize_t const r = ::send(fd_, p, n, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) throw failure(std::string{"send failed: "} + std::strerror(errno));
        p += r;
        n -= static_cast<std::size_t>(r);
    }
}

void channel::receive_all(void* data, std::size_t n, int timeout_s) {
    auto* p = static_cast<char*>(data);
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds{timeout_s};
    while (n > 0) {
        auto const left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd pfd{fd_, POLLIN, 0};
        int const ready = ::poll(&pfd, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) throw failure("the peer sent nothing for " + std::to_string(timeout_s) + " s");
        ssize_t const r = ::recv(fd_, p, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) throw failure("the peer closed the connection");
        p += r;
        n -= static_cast<std::size_t>(r);
    }
}

setup_message channel::swap(setup_message const& mine) {
    std::array<std::byte, setup_message::wire_size> out{};
    for (std::size_t i = 0; i < 4; ++i)
        out[i] = static_cast<std::byte>(magic[i]);
    out[4] = std::byte{version};
    out[5] = std::byte{mine.test};
    out[6] = std::byte{mine.flags};
    put(out.data() + 8, mine.max_size, 8);
    put(out.data() + 16, mine.iterations, 8);
    auto const e = mine.endpoint.to_bytes();
    std::memcpy(out.data() + 24, e.data(), e.size());
    auto const b = mine.buffer.to_bytes();
    std::memcpy(out.data() + 24 + e.size(), b.data(), b.size());
    send_all(out.data(), out.size());
    std::array<std::byte, setup_message::wire_size> in{};
    receive_all(in.data(), in.size(), 120);
    for (std::size_t i = 0; i < 4; ++i)
        if (in[i] != static_cast<std::byte>(magic[i])) throw failure("the peer is not rdmacxx-perf (wrong magic)");
    if (in[4] != std::byte{version})
        throw failure("the peer speaks version " + std::to_string(std::to_integer<int>(in[4])) + ", this is " +
                      std::to_string(version));
    setup_message theirs;
    theirs.test = std::to_integer<std::uint8_t>(in[5]);
    theirs.flags = std::to_integer<std::uint8_t>(in[6]);
    theirs.max_size = get(in.data() + 8, 8);
    theirs.iterations = get(in.data() + 16, 8);
    theirs.endpoint = rdmacxx::endpoint::from_bytes(std::span{in}.subspan(24, rdmacxx::endpoint::wire_size));
    theirs.buffer =
        rdmacxx::remote_span<std::byte>::from_bytes(std::span{in}.subspan(24 + rdmacxx::endpoint::wire_size));
    auto const names = test_names();
    if (theirs.test != mine.test || theirs.flags != mine.flags || theirs.max_size != mine.max_size ||
        theirs.iterations != mine.iterations)
        throw failure("the sides disagree: here " + std::string{names.at(mine.test)} + " up to " +
                      std::to_string(mine.max_size) + " B, " + std::to_string(mine.iterations) + " iterations, flags " +
                      std::to_string(mine.flags) + "; the peer " +
                      std::string{theirs.test < names.size() ? names[theirs.test] : "?"} + " up to " +
                      std::to_string(theirs.max_size) + " B, " + std::to_string(theirs.iterations) +
                      " iterations, flags " + std::to_string(theirs.flags) + ": give both the same test and flags");
    return theirs;
}

void channel::barrier(int timeout_s) {
    char c = 'b';
    send_all(&c, 1);
    receive_all(&c, 1, timeout_s);
    if (c != 'b') throw failure("out of step with the peer (barrier)");
}

void channel::send_pair(std::uint64_t a, std::uint64_t b) {
    std::array<std::byte, 17> out{};
    out[0] = std::byte{'c'};
    put(out.data() + 1, a, 8);
    put(out.data() + 9, b, 8);
    send_all(out.data(), out.size());
}

std::pair<std::uint64_t, std::uint64_t> channel::receive_pair(int timeout_s) {
    std::array<std::byte, 17> in{};
    receive_all(in.data(), in.size(), timeout_s);
    if (in[0] != std::byte{'c'}) throw failure("out of step with the peer (count)");
    return {get(in.data() + 1, 8), get(in.data() + 9, 8)};
}

std::optional<std::pair<std::uint64_t, std::uint64_t>> channel::try_receive_pair() {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 0) != 1) return std::nullopt;
    return receive_pair(60);
}

} // namespace perf
