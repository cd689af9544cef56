// cm_client: the active side of an RDMA CM echo pair, modelled on rdma-core's rdma_client:
// connects to the server (-s, port 7471 by default) over RC, sends a message, receives it back
// and checks it byte for byte, -n times, then disconnects.
//
//   cm_client -s server_address [-p port] [-S size] [-n iterations] [-e]

#include "rdmacxx/rdmacxx.hpp"

#include <getopt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;

namespace {

struct options {
    std::string server;
    std::uint16_t port = 7471;
    std::size_t size = 16;
    unsigned iterations = 1;
    bool events = false;
};

template <class Completion>
int run(options const& o) {
    // The server may still be starting: retry a rejected connect (no listener yet) for a while.
    auto const where = cm::address::resolve(o.server, o.port);
    for (int attempt = 0;; ++attempt) {
        try {
            auto conn = cm::connect<rx::rc, Completion>(where);
            std::vector<std::byte> out(o.size), in(o.size);
            auto out_mr = conn.pd().register_memory(std::span{out}, rx::access::local_write);
            auto in_mr = conn.pd().register_memory(std::span{in}, rx::access::local_write);
            for (unsigned i = 0; i < o.iterations; ++i) {
                for (std::size_t k = 0; k < o.size; ++k)
                    out[k] = static_cast<std::byte>((k * 7 + i) & 0xff);
                std::memset(in.data(), 0, in.size());
                conn.qp().post_recv(rx::recv{in_mr.span()}.id(1));
                conn.qp().post(rx::send{out_mr.span()}.id(2));
                for (int done = 0; done < 2; ++done)
                    conn.cq().wait_one().throw_if_error();
                if (std::memcmp(in.data(), out.data(), o.size) != 0) {
                    std::fprintf(stderr, "cm_client: echo %u differs from what was sent\n", i);
                    return 1;
                }
            }
            conn.disconnect(30s);
            std::printf("cm_client: %u messages of %zu bytes echoed intact by %s\n", o.iterations, o.size,
                        where.to_string().c_str());
            return 0;
        } catch (cm::rejected_error const&) {
            if (attempt == 50) throw;
            std::this_thread::sleep_for(100ms);
        }
    }
}

} // namespace

int main(int argc, char** argv) {
    options o;
    for (int c; (c = ::getopt(argc, argv, "s:p:S:n:e")) != -1;) {
        switch (c) {
        case 's':
            o.server = optarg;
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
            o.server.clear();
            optind = argc;
            break;
        }
    }
    if (o.server.empty()) {
        std::fprintf(stderr, "usage: %s -s server_address [-p port] [-S size] [-n iterations] [-e]\n", argv[0]);
        return 2;
    }
    try {
        return o.events ? run<rx::event_driven>(o) : run<rx::busy_poll>(o);
    } catch (rx::error const& e) {
        e.dump_detailed(std::cerr, "cm_client:", 2);
    } catch (std::exception const& e) {
        std::fprintf(stderr, "cm_client: %s\n", e.what());
    }
    return 1;
}
