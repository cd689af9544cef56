// mad_ping: an ibping work-alike that addresses its peer by GID, so it works on RoCE (Soft-RoCE
// included), where ibping can only address LIDs and its responder answers without a GRH.
// Same wire as ibping: vendor class 0x32 with OUI 0x001405, Get of attribute 0, the responder's
// host name in the reply.
//
// Usage: mad_ping [-d END_PORT] [-c COUNT] [-t TIMEOUT_MS] [-r RETRIES] [-l LEVEL] GID
//        mad_ping -S [-d END_PORT] [-c COUNT]
//   -d END_PORT  the local end port: "" (first active port), DEVICE, DEVICE/PORT, a GID or GUID
//   -S           responder: answer pings (COUNT of them, then exit; without -c, until killed)
//   -c COUNT     pings to send (default 10), or to answer with -S
//   -t MS        timeout of each try (default 200 ms); -r RETRIES: resends per ping (default 3)
//   -l LEVEL     dump_detailed level for errors (default 1; 2 prints the MADs)
//   GID          the peer port's GID, e.g. its link-local one
//                (cat /sys/class/infiniband/rxe0/ports/1/gids/0 there)
// The requester prints one line per ping and ping(8)'s summary; it exits 1 when any ping got no
// reply.
#include <rdmacxx/mad.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace rx = rdmacxx;
namespace mad = rdmacxx::mad;
using namespace std::chrono_literals;

namespace {
constexpr std::uint8_t ping_class = 0x32;    // ibping's vendor class
constexpr std::uint32_t ping_oui = 0x001405; // the OpenIB OUI
constexpr std::size_t host_name_bytes = 64;

int respond(mad::port& p, long count) {
    auto a = mad::agent::responder(p, ping_class, 1, {mad::method::get}, ping_oui);
    char host[host_name_bytes] = {};
    (void)::gethostname(host, sizeof host - 1);
    std::cout << "mad_ping: answering on " << p.to_string() << " (" << p.where().gid().to_string() << ") as " << host
              << std::endl;
    for (long served = 0; count <= 0 || served < count;) {
        auto got = a.receive(1000ms);
        if (!got || got->mad.header().attribute_id != 0) continue;
        mad::packet reply = mad::make_response(got->mad);
        auto data = reply.data();
        std::fill(data.begin(), data.end(), std::byte{0});
        for (std::size_t i = 0; host[i] != '\0'; ++i)
            data[i] = static_cast<std::byte>(host[i]);
        a.respond(*got, reply);
        ++served;
    }
    return 0;
}

int request(mad::port& p, rx::gid const& peer, long count, mad::rpc_options const& o, int level) {
    mad::agent a(p, ping_class, 1, ping_oui);
    mad::address to;
    to.gid = peer;
    auto const from = p.source_gid_for(peer);
    std::cout << "MAD PING " << peer << " from " << p.to_string() << " GID index " << from.index << " " << from.gid
              << std::endl;
    std::vector<double> rtt;
    std::string host;
    auto const start = std::chrono::steady_clock::now();
    for (long i = 0; i < count; ++i) {
        auto const t0 = std::chrono::steady_clock::now();
        try {
            mad::packet const r = a.call(a.make_request(mad::method::get, 0), to, o);
            double const ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            rtt.push_back(ms);
            auto const data = r.data();
            host.clear();
            for (std::size_t k = 0; k < host_name_bytes && data[k] != std::byte{0}; ++k)
                host += static_cast<char>(data[k]);
            std::cout << "Pong from " << host << " (" << peer << "): time " << ms << " ms" << std::endl;
        } catch (mad::mad_timeout_error const& e) {
            std::cout << "no pong: " << e.what() << std::endl;
        } catch (rx::error& e) {
            e.push_context("Failed pinging " + peer.to_string());
            e.dump_detailed(std::cerr, "E:", level);
            return 1;
        }
    }
    double const total = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    auto const received = static_cast<long>(rtt.size());
    std::cout << "\n--- " << (host.empty() ? peer.to_string() : host) << " (" << peer << ") mad_ping statistics ---\n"
              << count << " packets transmitted, " << received << " received, "
              << (count > 0 ? 100 * (count - received) / count : 0) << "% packet loss, time " << total << " ms\n";
    if (!rtt.empty()) {
        double sum = 0;
        for (double const x : rtt)
            sum += x;
        std::cout << "rtt min/avg/max = " << *std::min_element(rtt.begin(), rtt.end()) << "/"
                  << sum / static_cast<double>(rtt.size()) << "/" << *std::max_element(rtt.begin(), rtt.end())
                  << " ms\n";
    }
    return received == count ? 0 : 1;
}
} // namespace

int main(int argc, char** argv) {
    std::string description, target;
    bool server = false;
    long count = -1;
    int level = 1;
    mad::rpc_options o;
    for (int i = 1; i < argc; ++i) {
        std::string const arg = argv[i];
        bool const has_value = i + 1 < argc;
        if (arg == "-S")
            server = true;
        else if (arg == "-d" && has_value)
            description = argv[++i];
        else if (arg == "-c" && has_value)
            count = std::atol(argv[++i]);
        else if (arg == "-t" && has_value)
            o.timeout = std::chrono::milliseconds{std::atol(argv[++i])};
        else if (arg == "-r" && has_value)
            o.retries = static_cast<unsigned>(std::atoi(argv[++i]));
        else if (arg == "-l" && has_value)
            level = std::atoi(argv[++i]);
        else if (arg.size() > 1 && arg[0] == '-') {
            std::cerr << "usage: " << argv[0]
                      << " [-d END_PORT] [-c COUNT] [-t TIMEOUT_MS] [-r RETRIES] [-l LEVEL] GID\n"
                      << "       " << argv[0] << " -S [-d END_PORT] [-c COUNT]\n";
            return 2;
        } else
            target = arg;
    }
    try {
        mad::port p{description};
        if (server) return respond(p, count);
        if (target.empty()) {
            std::cerr << "mad_ping: which GID? (e.g. the peer's /sys/class/infiniband/DEV/ports/1/gids/0)\n";
            return 2;
        }
        return request(p, rx::gid::parse(target), count < 0 ? 10 : count, o, level);
    } catch (rx::error& e) {
        e.push_context(server ? "Failed answering pings" : "Failed pinging " + target);
        e.dump_detailed(std::cerr, "E:", level);
        return 1;
    }
}
