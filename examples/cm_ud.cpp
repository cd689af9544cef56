// cm_ud: a UD exchange through the RDMA CM (UDP port space), modelled on rdma-core's udaddy.
// The server accepts the client's service lookup; the client learns the server's address
// handle, QPN and Q_Key from the `established` event and sends -C datagrams of -S bytes; the
// server answers each from the address of the datagram; the client checks every answer byte
// for byte.
//
//   server:  cm_ud [-b bind_address] [-p port] [-C count] [-S size]
//   client:  cm_ud -s server_address [-p port] [-C count] [-S size]

#include "rdmacxx/rdmacxx.hpp"

#include <getopt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;

namespace {

struct options {
    std::string server, bind = "0.0.0.0";
    std::uint16_t port = 7174;
    unsigned count = 10;
    std::size_t size = 100;
};

std::byte pattern(std::size_t k, unsigned seq) {
    return static_cast<std::byte>((k * 3 + std::size_t{seq} * 13) & 0xff);
}

int serve(options const& o) {
    cm::listener<rx::ud> server{cm::address::resolve(o.bind, o.port)};
    std::printf("cm_ud: listening on %s\n", server.cm_id().local_address().to_string().c_str());
    // Two receive slots, alternating; the first is posted before accepting, since the client
    // sends the moment it learns our QPN and an unposted UD receive drops the datagram.
    std::size_t const slot = rx::ud::grh_bytes + o.size;
    std::vector<std::byte> buf(2 * slot);
    std::optional<rx::memory_region> mr;
    auto conn = server.get_request(60s).accept<rx::ud, rx::busy_poll>({}, {}, [&](auto& c) {
        mr.emplace(c.pd().register_memory(std::span{buf}, rx::access::local_write));
        c.qp().post_recv(rx::recv{mr->span().subspan(0, slot)}.id(0));
    });
    // Across a wire the client's next datagram may complete before our answer's send does: it
    // is kept for the next round.
    std::optional<rx::work_completion> early;
    for (unsigned i = 0; i < o.count; ++i) {
        auto const wc = early ? *std::exchange(early, std::nullopt) : conn.cq().wait_one();
        wc.throw_if_error();
        std::size_t const at = (i % 2) * slot;
        if (i + 1 < o.count) conn.qp().post_recv(rx::recv{mr->span().subspan(slot - at, slot)}.id(i + 1));
        conn.reply_to(wc, std::span{buf}.subspan(at, slot));
        auto const payload = mr->span().subspan(at + rx::ud::grh_bytes, wc.byte_len() - rx::ud::grh_bytes);
        conn.qp().post(rx::send{payload}.to(*conn.peer_ah(), conn.peer_qpn(), conn.peer_qkey()).id(2));
        for (;;) { // the send's completion; a receive completing meanwhile is kept for the loop
            auto const sent = conn.cq().wait_one();
            sent.throw_if_error();
            if (!sent.is_recv()) break;
            if (early) {
                std::fprintf(stderr, "cm_ud: the client sent twice before its answer came\n");
                return 1;
            }
            early = sent;
        }
    }
    mr.reset();
    std::printf("cm_ud: answered %u datagrams\n", o.count);
    return 0;
}

int run(options const& o) {
    auto const where = cm::address::resolve(o.server, o.port);
    for (int attempt = 0;; ++attempt) {
        try {
            auto conn = cm::connect<rx::ud, rx::busy_poll>(where);
            std::printf("cm_ud: server QPN %u, Q_Key 0x%x\n", conn.peer_qpn(), conn.peer_qkey());
            std::vector<std::byte> out(o.size), in(rx::ud::grh_bytes + o.size);
            auto out_mr = conn.pd().register_memory(std::span{out}, rx::access::local_write);
            auto in_mr = conn.pd().register_memory(std::span{in}, rx::access::local_write);
            for (unsigned i = 0; i < o.count; ++i) {
                for (std::size_t k = 0; k < o.size; ++k)
                    out[k] = pattern(k, i);
                conn.qp().post_recv(rx::recv{in_mr.span()}.id(1));
                conn.qp().post(rx::send{out_mr.span()}.to(*conn.peer_ah(), conn.peer_qpn(), conn.peer_qkey()).id(2));
                std::size_t got = 0;
                for (int done = 0; done < 2; ++done) {
                    auto const wc = conn.cq().wait_one();
                    wc.throw_if_error();
                    if (wc.is_recv()) got = wc.byte_len() - rx::ud::grh_bytes;
                }
                if (got != o.size || std::memcmp(in.data() + rx::ud::grh_bytes, out.data(), o.size) != 0) {
                    std::fprintf(stderr, "cm_ud: answer %u differs from what was sent\n", i);
                    return 1;
                }
            }
            std::printf("cm_ud: %u datagrams of %zu bytes answered intact by %s\n", o.count, o.size,
                        where.to_string().c_str());
            return 0;
        } catch (cm::rejected_error const&) { // no listener yet
            if (attempt == 50) throw;
            std::this_thread::sleep_for(100ms);
        } catch (cm::unreachable_error const&) {
            if (attempt == 50) throw;
            std::this_thread::sleep_for(100ms);
        }
    }
}

} // namespace

int main(int argc, char** argv) {
    options o;
    for (int c; (c = ::getopt(argc, argv, "s:b:p:C:S:")) != -1;) {
        switch (c) {
        case 's':
            o.server = optarg;
            break;
        case 'b':
            o.bind = optarg;
            break;
        case 'p':
            o.port = static_cast<std::uint16_t>(std::strtoul(optarg, nullptr, 0));
            break;
        case 'C':
            o.count = static_cast<unsigned>(std::strtoul(optarg, nullptr, 0));
            break;
        case 'S':
            o.size = std::strtoul(optarg, nullptr, 0);
            break;
        default:
            std::fprintf(stderr, "usage: %s [-s server_address | -b bind_address] [-p port] [-C count] [-S size]\n",
                         argv[0]);
            return 2;
        }
    }
    try {
        return o.server.empty() ? serve(o) : run(o);
    } catch (rx::error const& e) {
        e.dump_detailed(std::cerr, "cm_ud:", 2);
    } catch (std::exception const& e) {
        std::fprintf(stderr, "cm_ud: %s\n", e.what());
    }
    return 1;
}
