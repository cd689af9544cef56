#pragma once
// The ping-pong shared by rc_pingpong, uc_pingpong and ud_pingpong: one program over rdmacxx,
// templated on the transport, modelled on rdma-core's ibv_rc_pingpong / ibv_uc_pingpong /
// ibv_ud_pingpong, with their flags and their out-of-band TCP exchange of LID, QPN, PSN and GID
// (the same text message). Its option parsing, out-of-band exchange and error reporting serve
// srq_pingpong too.
//
//   server:  xx_pingpong [options]
//   client:  xx_pingpong [options] SERVER
//
// The client sends a message, the server echoes it back, for -n iterations. The client checks
// every echo byte for byte and prints the round-trip times (median, p99) and the bandwidth.
// UD messages are at most one path MTU and land behind a 40-byte GRH.

#include "rdmacxx/verbs.hpp"

#include <getopt.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace rx = rdmacxx;

namespace pingpong {

struct options {
    std::string port = "18515";
    std::string device;
    std::uint8_t ib_port = 1;
    int gid_index = -1;
    std::size_t size = 4096;
    unsigned iterations = 1000;
    std::uint32_t rx_depth = 64;
    std::uint32_t mtu = 1024;
    std::uint8_t sl = 0; // service level
    unsigned num_qp = 1; // QPs per side (srq_pingpong's -q)
    bool events = false;
    bool odp = false; // register the buffers for on-demand paging
    std::optional<std::string> server;
};

// The help text; `defaults` are the program's defaults, `multi_qp` whether it takes -q.
void usage(char const* argv0, options const& defaults, bool multi_qp) {
    std::printf("Usage:\n"
                "  %s            start a server and wait for connection\n"
                "  %s <host>     connect to server at <host>\n\n"
                "Options:\n",
                argv0, argv0);
    std::printf("  -p, --port=<port>      listen on/connect to port <port> (default %s)\n"
                "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n"
                "  -i, --ib-port=<port>   use port <port> of IB device (default %u)\n"
                "  -s, --size=<size>      size of message to exchange (default %zu)\n"
                "  -m, --mtu=<size>       path MTU (default %u)\n",
                defaults.port.c_str(), unsigned{defaults.ib_port}, defaults.size, defaults.mtu);
    if (multi_qp) std::printf("  -q, --num-qp=<num>     number of QPs to use (default %u)\n", defaults.num_qp);
    std::printf("  -n, --iters=<iters>    number of exchanges (default %u)\n"
                "  -r, --rx-depth=<dep>   number of receives to post at a time (default %u)\n"
                "  -l, --sl=<sl>          service level value (default %u)\n"
                "  -g, --gid-idx=<gid>    local port GID index (default: the best RoCE v2 GID)\n"
                "  -e, --events           sleep on CQ events (default poll)\n"
                "  -c, --chk              validate received buffers (always done)\n"
                "  -o, --odp              use on-demand paging for the message buffers\n",
                defaults.iterations, defaults.rx_depth, unsigned{defaults.sl});
}

// The size of the text message below, with its terminating NUL.
constexpr std::size_t wire_size = sizeof "0000:000000:000000:00000000000000000000000000000000";

// The fixed-size text message ibv_rc_pingpong exchanges: "LID:QPN:PSN:GID" in hex, the GID as
// its 16 raw bytes in hex.
std::string to_wire(rx::endpoint const& e) {
    char msg[wire_size];
    int n = std::snprintf(msg, sizeof msg, "%04x:%06x:%06x:", e.lid, e.qpn, e.psn);
    for (std::uint8_t b : e.gid.bytes())
        n += std::snprintf(msg + n, sizeof msg - static_cast<std::size_t>(n), "%02x", b);
    return {msg, sizeof msg}; // with its terminating NUL, as the C example sends it
}

rx::endpoint from_wire(std::string const& msg) {
    rx::endpoint e;
    unsigned lid = 0, qpn = 0, psn = 0;
    char gid_hex[33] = {};
    if (std::sscanf(msg.c_str(), "%x:%x:%x:%32s", &lid, &qpn, &psn, gid_hex) != 4 || std::strlen(gid_hex) != 32)
        throw rx::argument_error("malformed address message from peer: \"" + msg + "\"");
    std::array<std::uint8_t, 16> raw{};
    for (std::size_t i = 0; i < 16; ++i) {
        unsigned v = 0;
        std::sscanf(gid_hex + 2 * i, "%2x", &v);
        raw[i] = static_cast<std::uint8_t>(v);
    }
    e.lid = static_cast<std::uint16_t>(lid);
    e.qpn = qpn;
    e.psn = psn;
    e.gid = rx::gid{raw};
    return e;
}

// A connected TCP socket for the out-of-band exchange.
class tcp_socket {
public:
    static tcp_socket connect_to(std::string const& host, std::string const& port) {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
            throw std::runtime_error("cannot resolve " + host + ":" + port + ": " + ::gai_strerror(rc));
        for (int attempt = 0; attempt < 100; ++attempt) { // the server may still be starting
            for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
                int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
                if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                    ::freeaddrinfo(res);
                    return tcp_socket{fd};
                }
                if (fd >= 0) ::close(fd);
            }
            ::usleep(100000);
        }
        ::freeaddrinfo(res);
        throw std::runtime_error("cannot connect to " + host + ":" + port);
    }

    static tcp_socket accept_on(std::string const& port) {
        addrinfo hints{};
        hints.ai_family = AF_INET6;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE;
        addrinfo* res = nullptr;
        if (int rc = ::getaddrinfo(nullptr, port.c_str(), &hints, &res); rc != 0)
            throw std::runtime_error(std::string{"cannot listen on port "} + port + ": " + ::gai_strerror(rc));
        int lfd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
        int one = 1;
        ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int zero = 0;
        ::setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        if (lfd < 0 || ::bind(lfd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(lfd, 1) != 0) {
            ::freeaddrinfo(res);
            throw std::runtime_error("cannot listen on port " + port + ": " + std::strerror(errno));
        }
        ::freeaddrinfo(res);
        int fd = ::accept(lfd, nullptr, nullptr);
        ::close(lfd);
        if (fd < 0) throw std::runtime_error(std::string{"accept failed: "} + std::strerror(errno));
        return tcp_socket{fd};
    }

    tcp_socket(tcp_socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    ~tcp_socket() {
        if (fd_ >= 0) ::close(fd_);
    }

    void send_all(std::string const& s) const {
        if (::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(s.size()))
            throw std::runtime_error("out-of-band send failed");
    }
    std::string receive_exactly(std::size_t n) const {
        std::string s(n, '\0');
        for (std::size_t got = 0; got < n;) {
            ssize_t r = ::recv(fd_, s.data() + got, n - got, 0);
            if (r <= 0) throw std::runtime_error("out-of-band peer closed the connection");
            got += static_cast<std::size_t>(r);
        }
        return s;
    }

private:
    explicit tcp_socket(int fd) : fd_(fd) {}
    int fd_;
};

void print_endpoint(char const* which, rx::endpoint const& e) {
    std::printf("  %s address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", which, e.lid, e.qpn, e.psn,
                e.gid.to_string().c_str());
}

// Registers `storage` for local write, and with -o for on-demand paging too.
inline rx::memory_region register_buffers(rx::protection_domain& pd, std::vector<std::byte>& storage, bool odp) {
    if (!odp) return pd.register_memory(std::span{storage}, rx::access::local_write);
    try {
        return pd.register_memory(std::span{storage}, rx::access::local_write | rx::access::on_demand);
    } catch (rx::error& e) {
        e.push_context("-o asks for on-demand paging: does the device support it?");
        throw;
    }
}

// The out-of-band exchange of rdma-core's ping-pongs over TCP port `opt.port`, one `to_wire`
// message per entry of `local` (not empty), in order. The client sends its messages, reads as
// many from the server, calls `ready(remote)` and answers "done"; the server reads the client's,
// calls `ready(remote)` and only then answers with its own, and waits for "done". When it
// returns, the QPs of both sides are ready. Returns the peer's endpoints.
template <class Ready>
std::vector<rx::endpoint> exchange(options const& opt, std::vector<rx::endpoint> const& local, Ready const& ready) {
    std::string wire;
    for (rx::endpoint const& e : local)
        wire += to_wire(e);
    bool const is_client = opt.server.has_value();
    tcp_socket sock = is_client ? tcp_socket::connect_to(*opt.server, opt.port) : tcp_socket::accept_on(opt.port);
    auto receive = [&] {
        std::string const messages = sock.receive_exactly(wire.size());
        std::vector<rx::endpoint> remote;
        remote.reserve(local.size());
        for (std::size_t at = 0; at < messages.size(); at += wire_size)
            remote.push_back(from_wire(messages.substr(at, wire_size)));
        return remote;
    };
    std::vector<rx::endpoint> remote;
    if (is_client) {
        sock.send_all(wire);
        remote = receive();
        ready(remote);
        sock.send_all(std::string("done", 5));
    } else {
        remote = receive();
        ready(remote);
        sock.send_all(wire);
        (void)sock.receive_exactly(5); // "done": the client's QPs are ready too
    }
    return remote;
}

template <class Transport, class Completion>
int run(options const& opt) {
    constexpr bool is_ud = !Transport::connected;
    constexpr std::size_t grh = is_ud ? 40 : 0; // UD receives land behind a GRH
    rx::device_list const devices;
    if (devices.empty()) throw std::runtime_error("no RDMA device found (" + devices.describe() + ")");
    rx::context ctx = opt.device.empty() ? devices[0].open() : devices.find(opt.device).open();
    rx::end_port const port(ctx, opt.ib_port, opt.gid_index);

    rx::protection_domain pd(ctx);
    std::vector<std::byte> storage(grh + opt.size);
    rx::memory_region mr = register_buffers(pd, storage, opt.odp);
    rx::local_span<std::byte> const recv_buf = mr.span();        // GRH (UD) + message
    rx::local_span<std::byte> const msg = recv_buf.subspan(grh); // the message
    std::span<std::byte> const buf = msg.span();
    rx::completion_queue<Completion> cq(ctx, static_cast<int>(opt.rx_depth) + 2);
    rx::queue_pair<Transport, Completion> qp(pd, cq, cq, {.max_send_wr = 1, .max_recv_wr = opt.rx_depth});
    rx::qp_settings copt;
    copt.path_mtu = rx::mtu_from_bytes(opt.mtu);
    copt.service_level = opt.sl;
    if constexpr (is_ud) {
        qp.activate(port, copt);
        if (opt.size > qp.path_mtu_bytes())
            throw rx::argument_error("a UD message of " + std::to_string(opt.size) + " bytes is over the path MTU of " +
                                     std::to_string(qp.path_mtu_bytes()) + " bytes (-s)");
    } else {
        qp.to_init(port, copt);
    }
    // Receives are kept rx_depth deep, all on the one buffer (one message is in flight at a
    // time): UC and UD drop a message that finds no receive posted.
    for (unsigned k = 0; k < opt.rx_depth; ++k)
        qp.post_recv(rx::recv{recv_buf}.id(1));

    rx::endpoint const local = qp.local_endpoint(port);
    bool const is_client = opt.server.has_value();
    rx::endpoint const remote = exchange(opt, {local}, [&]([[maybe_unused]] std::vector<rx::endpoint> const& peer) {
                                    if constexpr (!is_ud) {
                                        qp.to_rtr(port, peer.front(), copt);
                                        qp.to_rts(copt);
                                    }
                                }).front();
    std::optional<rx::address_handle> ah;
    if constexpr (is_ud) ah.emplace(pd, port, remote.lid, remote.gid, opt.sl);
    auto const message = [&] {
        if constexpr (is_ud)
            return rx::send{msg}.id(2).to(*ah, remote.qpn, copt.qkey);
        else
            return rx::send{msg}.id(2);
    }();
    std::printf("%s_pingpong (%s, %s completions) on %s, path MTU %u\n",
                is_ud                              ? "ud"
                : Transport::qp_type == IBV_QPT_RC ? "rc"
                                                   : "uc",
                is_client ? "client" : "server", Completion::uses_channel ? "event-driven" : "busy-poll",
                port.to_string().c_str(), qp.path_mtu_bytes());
    print_endpoint("local ", local);
    print_endpoint("remote", remote);

    // Completions of receives (wr_id 1) and sends (wr_id 2) seen and not yet consumed: the next
    // message can complete before the previous echo's send does, and must not be lost.
    std::array<unsigned, 3> unconsumed{};
    auto wait_for = [&](std::uint64_t wr_id) {
        while (unconsumed[wr_id] == 0) {
            auto const wc = cq.wait_one();
            wc.throw_if_error();
            ++unconsumed[wc.wr_id()];
        }
        --unconsumed[wr_id];
    };

    std::vector<double> rtt_us;
    rtt_us.reserve(opt.iterations);
    unsigned mismatches = 0;
    auto const start = std::chrono::steady_clock::now();
    for (unsigned i = 0; i < opt.iterations; ++i) {
        if (is_client) {
            for (std::size_t k = 0; k < buf.size(); ++k)
                buf[k] = static_cast<std::byte>((k + i * 13) & 0xff);
            auto const t0 = std::chrono::steady_clock::now();
            qp.post(message);
            // Both the send's and the echo's completion are needed before the buffer is reused.
            wait_for(2);
            wait_for(1);
            auto const t1 = std::chrono::steady_clock::now();
            rtt_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            for (std::size_t k = 0; k < buf.size(); ++k)
                if (buf[k] != static_cast<std::byte>((k + i * 13) & 0xff)) {
                    ++mismatches;
                    break;
                }
            qp.post_recv(rx::recv{recv_buf}.id(1));
        } else {
            wait_for(1); // the client's message is in buf
            // The next receive goes up before the echo: UC and UD have no RNR retry, and the
            // client sends again as soon as the echo arrives (by then the echo has left buf).
            qp.post_recv(rx::recv{recv_buf}.id(1));
            qp.post(message);
            wait_for(2);
        }
    }
    auto const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double const bytes = 2.0 * static_cast<double>(opt.size) * opt.iterations;
    std::printf("%.0f bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, seconds, bytes * 8 / seconds / 1e6);
    std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", opt.iterations, seconds, seconds * 1e6 / opt.iterations);
    if (is_client && !rtt_us.empty()) {
        std::sort(rtt_us.begin(), rtt_us.end());
        auto pct = [&](double p) {
            return rtt_us[std::min(rtt_us.size() - 1,
                                   static_cast<std::size_t>(p * static_cast<double>(rtt_us.size())))];
        };
        std::printf("messages: %u round trips of %zu bytes, %.0f bytes moved\n", opt.iterations, opt.size, bytes);
        std::printf("round trip: median %.1f us, p99 %.1f us, min %.1f us, max %.1f us\n", pct(0.5), pct(0.99),
                    rtt_us.front(), rtt_us.back());
        std::printf("bandwidth: %.2f MB/s (both directions)\n", bytes / seconds / 1e6);
        std::printf("verified: %u of %u echoes matched byte for byte\n", opt.iterations - mismatches, opt.iterations);
    }
    return mismatches == 0 ? 0 : 1;
}

// Parses rdma-core's ping-pong flags into `opt`, which holds the program's defaults; -q only
// when `multi_qp`. Returns the exit status when the program is to stop here (-h, a usage error).
// Throws for a value out of range.
inline std::optional<int> parse(int argc, char** argv, options& opt, bool multi_qp) {
    options const defaults = opt;
    static option const long_options[] = {
        {"port", required_argument, nullptr, 'p'},
        {"ib-dev", required_argument, nullptr, 'd'},
        {"ib-port", required_argument, nullptr, 'i'},
        {"size", required_argument, nullptr, 's'},
        {"mtu", required_argument, nullptr, 'm'},
        {"num-qp", required_argument, nullptr, 'q'},
        {"iters", required_argument, nullptr, 'n'},
        {"rx-depth", required_argument, nullptr, 'r'},
        {"sl", required_argument, nullptr, 'l'},
        {"gid-idx", required_argument, nullptr, 'g'},
        {"events", no_argument, nullptr, 'e'},
        {"chk", no_argument, nullptr, 'c'},
        {"odp", no_argument, nullptr, 'o'},
        {"help", no_argument, nullptr, 'h'},
        {nullptr, 0, nullptr, 0},
    };
    char const* const short_options = multi_qp ? "p:d:i:s:m:q:n:r:l:g:ecoh" : "p:d:i:s:m:n:r:l:g:ecoh";
    for (int c; (c = ::getopt_long(argc, argv, short_options, long_options, nullptr)) != -1;) {
        switch (c) {
        case 'p':
            opt.port = optarg;
            break;
        case 'd':
            opt.device = optarg;
            break;
        case 'i':
            opt.ib_port = static_cast<std::uint8_t>(std::stoul(optarg));
            break;
        case 's':
            opt.size = std::stoul(optarg);
            break;
        case 'm':
            opt.mtu = static_cast<std::uint32_t>(std::stoul(optarg));
            break;
        case 'q':
            if (!multi_qp) {
                usage(argv[0], defaults, multi_qp);
                return 1;
            }
            opt.num_qp = static_cast<unsigned>(std::stoul(optarg));
            break;
        case 'n':
            opt.iterations = static_cast<unsigned>(std::stoul(optarg));
            break;
        case 'l':
            if (unsigned long const sl = std::stoul(optarg); sl <= 15)
                opt.sl = static_cast<std::uint8_t>(sl);
            else
                throw rx::argument_error("service level " + std::to_string(sl) + " is over 15 (-l)");
            break;
        case 'g':
            opt.gid_index = std::stoi(optarg);
            break;
        case 'r':
            opt.rx_depth = static_cast<std::uint32_t>(std::stoul(optarg));
            break;
        case 'e':
            opt.events = true;
            break;
        case 'c': // received data is always checked
            break;
        case 'o':
            opt.odp = true;
            break;
        default:
            usage(argv[0], defaults, multi_qp);
            return c == 'h' ? 0 : 1;
        }
    }
    if (optind == argc - 1)
        opt.server = argv[optind];
    else if (optind < argc) {
        usage(argv[0], defaults, multi_qp);
        return 1;
    }
    if (opt.size == 0 || opt.iterations == 0 || opt.rx_depth == 0)
        throw rx::argument_error("size, iterations and rx-depth must be positive");
    (void)rx::mtu_from_bytes(opt.mtu);
    return std::nullopt;
}

// Runs `body` and returns its exit status; an exception is printed to stderr and gives 1.
template <class Body>
int guarded(Body const& body) {
    try {
        return body();
    } catch (rx::error const& e) {
        e.dump_detailed(std::cerr, "E:", 2);
        return 1;
    } catch (std::exception const& e) {
        std::cerr << "E: " << e.what() << '\n';
        return 1;
    }
}

/// Parses rdma-core's pingpong flags and runs the ping-pong over `Transport`.
template <class Transport>
int main(int argc, char** argv, std::size_t default_size) {
    options opt;
    opt.size = default_size;
    return guarded([&] {
        if (std::optional<int> const status = parse(argc, argv, opt, false)) return *status;
        return opt.events ? run<Transport, rx::event_driven>(opt) : run<Transport, rx::busy_poll>(opt);
    });
}

} // namespace pingpong
