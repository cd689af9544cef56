// cm_server: the passive side of an RDMA CM echo pair, modelled on rdma-core's rdma_server:
// listens on port 7471 (-p), accepts one client over RC, receives its message and sends it
// back, -n times, then waits for the client to disconnect.
//
//   cm_server [-s bind_address] [-p port] [-S size] [-n iterations] [-e]
//
// -e waits for completions by events instead of busy polling. Talks to cm_client.

#include "rdmacxx/rdmacxx.hpp"

#include <getopt.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;

namespace {

struct options {
    std::string address = "0.0.0.0";
    std::uint16_t port = 7471;
    std::size_t size = 16;
    unsigned iterations = 1;
    bool events = false;
};

template <class Completion>
int serve(options const& o) {
    cm::listener<rx::rc> server{cm::address::resolve(o.address, o.port)};
    std::printf("cm_server: listening on %s\n", server.cm_id().local_address().to_string().c_str());
    // The first receive is posted before the accept goes out: the client may send the moment it
    // is connected. Each later one before the echo that lets the client send again.
    std::vector<std::byte> buf(2 * o.size);
    std::optional<rx::memory_region> mr;
    auto conn = server.get_request(60s).accept<rx::rc, Completion>({}, {}, [&](auto& c) {
        mr.emplace(c.pd().register_memory(std::span{buf}, rx::access::local_write));
        c.qp().post_recv(rx::recv{mr->span().first(o.size)}.id(1));
    });
    std::printf("cm_server: connected to %s\n", conn.peer_name().c_str());
    auto const in = mr->span().first(o.size), out = mr->span().subspan(o.size, o.size);
    std::optional<std::uint32_t> received; // the next message's length, when it came before the echo's completion
    for (unsigned i = 0; i < o.iterations; ++i) {
        if (!received) {
            auto const wc = conn.cq().wait_one(); // the message (wr_id 1)
            wc.throw_if_error();
            received = wc.byte_len();
        }
        std::uint32_t const len = *std::exchange(received, std::nullopt);
        std::memcpy(buf.data() + o.size, buf.data(), len);
        if (i + 1 < o.iterations) conn.qp().post_recv(rx::recv{in}.id(1));
        conn.qp().post(rx::send{out.first(len)}.id(2));
        for (bool sent = false; !sent;) { // the echo's completion; the next message's may come first
            auto const wc = conn.cq().wait_one();
            wc.throw_if_error();
            if (wc.wr_id() == 2)
                sent = true;
            else
                received = wc.byte_len();
        }
    }
    if (!conn.wait_disconnected(30s)) {
        std::fprintf(stderr, "cm_server: the client did not disconnect\n");
        return 1;
    }
    std::printf("cm_server: echoed %u messages of %zu bytes; client disconnected\n", o.iterations, o.size);
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    options o;
    for (int c; (c = ::getopt(argc, argv, "s:p:S:n:e")) != -1;) {
        switch (c) {
        case 's':
            o.address = optarg;
            break;
        case 'p':
            o.port = static_cast<std::uint16_t>(std::strtoul(optarg, nullptr, 0));
            break;
        case 'S':
            o.size = std::strtoul(optarg, nullptr, 0);
            break;
        case 'n':
            o.iterations = static_cast<unsigned>(std::strtoul(optarg, nullptr, 0));
            break;
        case 'e':
            o.events = true;
            break;
        default:
            std::fprintf(stderr, "usage: %s [-s bind_address] [-p port] [-S size] [-n iterations] [-e]\n", argv[0]);
            return 2;
        }
    }
    try {
        return o.events ? serve<rx::event_driven>(o) : serve<rx::busy_poll>(o);
    } catch (rx::error const& e) {
        e.dump_detailed(std::cerr, "cm_server:", 2);
    } catch (std::exception const& e) {
        std::fprintf(stderr, "cm_server: %s\n", e.what());
    }
    return 1;
}
