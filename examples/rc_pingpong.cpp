// rc_pingpong: an RC ping-pong over rdmacxx, modelled on rdma-core's ibv_rc_pingpong, with its
// flags and its out-of-band TCP exchange of LID, QPN, PSN and GID (the same text message, so it
// talks to ibv_rc_pingpong too, as long as that one uses matching -s, -n and -r 1).
//
//   server:  rc_pingpong [options]
//   client:  rc_pingpong [options] SERVER
//
// The client sends a message, the server echoes it back, for -n iterations. The client checks
// every echo byte for byte and prints the round-trip times (median, p99) and the bandwidth.

#include "rdmacxx/rdmacxx.hpp"

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

namespace {

struct options {
    std::string port = "18515";
    std::string device;
    std::uint8_t ib_port = 1;
    int gid_index = -1;
    std::size_t size = 4096;
    unsigned iterations = 1000;
    std::uint32_t mtu = 1024;
    bool events = false;
    std::optional<std::string> server;
};

void usage(char const* argv0) {
    std::printf("Usage:\n"
                "  %s            start a server and wait for connection\n"
                "  %s <host>     connect to server at <host>\n\n"
                "Options:\n"
                "  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n"
                "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n"
                "  -i, --ib-port=<port>   use port <port> of IB device (default 1)\n"
                "  -s, --size=<size>      size of message to exchange (default 4096)\n"
                "  -m, --mtu=<size>       path MTU (default 1024)\n"
                "  -n, --iters=<iters>    number of exchanges (default 1000)\n"
                "  -g, --gid-idx=<gid>    local port GID index (default: the best RoCE v2 GID)\n"
                "  -e, --events           sleep on CQ events (default poll)\n",
                argv0, argv0);
}

// The fixed-size text message ibv_rc_pingpong exchanges: "LID:QPN:PSN:GID" in hex, the GID as
// its 16 raw bytes in hex.
std::string to_wire(rx::endpoint const& e) {
    char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"];
    int n = std::snprintf(msg, sizeof msg, "%04x:%06x:%06x:", e.lid, e.qpn, e.psn);
    for (std::uint8_t b : e.gid.bytes()) n += std::snprintf(msg + n, sizeof msg - static_cast<std::size_t>(n), "%02x", b);
    return {msg, sizeof msg};  // with its terminating NUL, as the C example sends it
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
        for (int attempt = 0; attempt < 100; ++attempt) {  // the server may still be starting
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

template <class Completion>
int run(options const& opt) {
    rx::device_list const devices;
    if (devices.empty()) throw std::runtime_error("no RDMA device found (" + devices.describe() + ")");
    rx::context ctx = opt.device.empty() ? devices[0].open() : devices.find(opt.device).open();
    rx::end_port const port(ctx, opt.ib_port, opt.gid_index);

    rx::protection_domain pd(ctx);
    std::vector<std::byte> buf(opt.size);
    rx::memory_region mr = pd.register_memory(std::span{buf}, rx::access::local_write);
    rx::local_span<std::byte> const msg = mr.span();
    rx::completion_queue<Completion> cq(ctx, 16);
    rx::queue_pair<rx::rc, Completion> qp(pd, cq, cq, {.max_send_wr = 1, .max_recv_wr = 1});
    qp.to_init(port);
    qp.post_recv(rx::recv{msg}.id(1));  // ready before the peer can send

    rx::endpoint const local = qp.local_endpoint(port);
    std::string const wire = to_wire(local);
    bool const is_client = opt.server.has_value();
    tcp_socket sock = is_client ? tcp_socket::connect_to(*opt.server, opt.port) : tcp_socket::accept_on(opt.port);
    rx::endpoint remote;
    rx::connect_options copt;
    copt.path_mtu = rx::mtu_from_bytes(opt.mtu);
    if (is_client) {
        sock.send_all(wire);
        remote = from_wire(sock.receive_exactly(wire.size()));
        qp.to_rtr(port, remote, copt);
        qp.to_rts(copt);
        sock.send_all(std::string("done", 5));
    } else {
        remote = from_wire(sock.receive_exactly(wire.size()));
        qp.to_rtr(port, remote, copt);
        qp.to_rts(copt);
        sock.send_all(wire);
        (void)sock.receive_exactly(5);  // "done": the client's QP is ready too
    }
    std::printf("rc_pingpong (%s, %s completions) on %s, path MTU %u\n", is_client ? "client" : "server",
                Completion::uses_channel ? "event-driven" : "busy-poll", port.to_string().c_str(), qp.path_mtu_bytes());
    print_endpoint("local ", local);
    print_endpoint("remote", remote);

    std::array<rx::work_completion, 2> wcs;
    auto wait_for = [&](std::uint64_t wr_id) {
        for (;;) {
            std::size_t const n = cq.wait(std::span{wcs});
            bool found = false;
            for (std::size_t i = 0; i < n; ++i) {
                wcs[i].throw_if_error();
                found = found || wcs[i].wr_id() == wr_id;
            }
            if (found || n == 2) return;
        }
    };

    std::vector<double> rtt_us;
    rtt_us.reserve(opt.iterations);
    unsigned mismatches = 0;
    auto const start = std::chrono::steady_clock::now();
    for (unsigned i = 0; i < opt.iterations; ++i) {
        if (is_client) {
            for (std::size_t k = 0; k < buf.size(); ++k) buf[k] = static_cast<std::byte>((k + i * 13) & 0xff);
            auto const t0 = std::chrono::steady_clock::now();
            qp.post(rx::send{msg}.id(2));
            // Both the send's and the echo's completion are needed before the buffer is reused.
            std::size_t seen = 0;
            while (seen < 2) {
                std::size_t const n = cq.wait(std::span{wcs});
                for (std::size_t k = 0; k < n; ++k) wcs[k].throw_if_error();
                seen += n;
            }
            auto const t1 = std::chrono::steady_clock::now();
            rtt_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            for (std::size_t k = 0; k < buf.size(); ++k)
                if (buf[k] != static_cast<std::byte>((k + i * 13) & 0xff)) {
                    ++mismatches;
                    break;
                }
            if (i + 1 < opt.iterations) qp.post_recv(rx::recv{msg}.id(1));
        } else {
            wait_for(1);  // the client's message is in buf
            if (i + 1 < opt.iterations) {
                qp.post(rx::send{msg}.id(2));
                wait_for(2);
                qp.post_recv(rx::recv{msg}.id(1));
            } else {
                qp.post(rx::send{msg}.id(2));
                wait_for(2);
            }
        }
    }
    auto const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double const bytes = 2.0 * static_cast<double>(opt.size) * opt.iterations;
    std::printf("%.0f bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, seconds, bytes * 8 / seconds / 1e6);
    std::printf("%u iters in %.2f seconds = %.2f usec/iter\n", opt.iterations, seconds, seconds * 1e6 / opt.iterations);
    if (is_client && !rtt_us.empty()) {
        std::sort(rtt_us.begin(), rtt_us.end());
        auto pct = [&](double p) { return rtt_us[std::min(rtt_us.size() - 1, static_cast<std::size_t>(p * static_cast<double>(rtt_us.size())))]; };
        std::printf("messages: %u round trips of %zu bytes, %.0f bytes moved\n", opt.iterations, opt.size, bytes);
        std::printf("round trip: median %.1f us, p99 %.1f us, min %.1f us, max %.1f us\n", pct(0.5), pct(0.99),
                    rtt_us.front(), rtt_us.back());
        std::printf("bandwidth: %.2f MB/s (both directions)\n", bytes / seconds / 1e6);
        std::printf("verified: %u of %u echoes matched byte for byte\n", opt.iterations - mismatches, opt.iterations);
    }
    return mismatches == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    options opt;
    static option const long_options[] = {
        {"port", required_argument, nullptr, 'p'},  {"ib-dev", required_argument, nullptr, 'd'},
        {"ib-port", required_argument, nullptr, 'i'}, {"size", required_argument, nullptr, 's'},
        {"mtu", required_argument, nullptr, 'm'},   {"iters", required_argument, nullptr, 'n'},
        {"gid-idx", required_argument, nullptr, 'g'}, {"events", no_argument, nullptr, 'e'},
        {"help", no_argument, nullptr, 'h'},        {nullptr, 0, nullptr, 0},
    };
    try {
        for (int c; (c = ::getopt_long(argc, argv, "p:d:i:s:m:n:g:eh", long_options, nullptr)) != -1;) {
            switch (c) {
            case 'p': opt.port = optarg; break;
            case 'd': opt.device = optarg; break;
            case 'i': opt.ib_port = static_cast<std::uint8_t>(std::stoul(optarg)); break;
            case 's': opt.size = std::stoul(optarg); break;
            case 'm': opt.mtu = static_cast<std::uint32_t>(std::stoul(optarg)); break;
            case 'n': opt.iterations = static_cast<unsigned>(std::stoul(optarg)); break;
            case 'g': opt.gid_index = std::stoi(optarg); break;
            case 'e': opt.events = true; break;
            default: usage(argv[0]); return c == 'h' ? 0 : 1;
            }
        }
        if (optind == argc - 1) opt.server = argv[optind];
        else if (optind < argc) {
            usage(argv[0]);
            return 1;
        }
        if (opt.size == 0 || opt.iterations == 0) throw rx::argument_error("size and iterations must be positive");
        (void)rx::mtu_from_bytes(opt.mtu);
        return opt.events ? run<rx::event_driven>(opt) : run<rx::busy_poll>(opt);
    } catch (rx::error const& e) {
        e.dump_detailed(std::cerr, "E:", 2);
        return 1;
    } catch (std::exception const& e) {
        std::cerr << "E: " << e.what() << '\n';
        return 1;
    }
}
