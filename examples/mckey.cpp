// mckey: multicast through the RDMA CM, modelled on rdma-core's mckey. Joins the group (-m,
// 239.1.2.3 by default) from the RDMA device that owns -b, then either receives -C datagrams
// (the default) and checks each byte for byte, or with -s sends -C datagrams of -S bytes to the
// group. Start the receivers first.
//
//   receiver:  mckey -b local_address [-m group] [-C count] [-S size]
//   sender:    mckey -b local_address -s [-m group] [-C count] [-S size]

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
    std::string bind, group = "239.1.2.3";
    bool sender = false;
    unsigned count = 10;
    std::size_t size = 100;
};

// Datagram `seq` carries seq in its first byte and a pattern derived from it after.
std::byte pattern(std::size_t k, unsigned seq) {
    return k == 0 ? static_cast<std::byte>(seq & 0xff) : static_cast<std::byte>((k * 5 + std::size_t{seq} * 11) & 0xff);
}

int run(options const& o) {
    cm::multicast_group<rx::busy_poll> group{cm::address::resolve(o.bind, 0), cm::address::resolve(o.group, 0)};
    std::printf("mckey: joined %s: QPN 0x%x, Q_Key 0x%x\n", o.group.c_str(), group.qpn(), group.qkey());
    if (o.sender) {
        std::vector<std::byte> out(o.size);
        auto mr = group.pd().register_memory(std::span{out}, rx::access::local_write);
        for (unsigned i = 0; i < o.count; ++i) {
            for (std::size_t k = 0; k < o.size; ++k)
                out[k] = pattern(k, i);
            group.qp().post(rx::send{mr.span()}.to(group.ah(), group.qpn(), group.qkey()).id(i));
            group.cq().wait_one().throw_if_error();
            std::this_thread::sleep_for(10ms);
        }
        std::printf("mckey: sent %u datagrams of %zu bytes\n", o.count, o.size);
        return 0;
    }
    std::size_t const slot = rx::ud::grh_bytes + o.size;
    std::vector<std::byte> in(slot * o.count);
    auto mr = group.pd().register_memory(std::span{in}, rx::access::local_write);
    for (unsigned i = 0; i < o.count; ++i)
        group.qp().post_recv(rx::recv{mr.span().subspan(i * slot, slot)}.id(i));
    std::printf("mckey: receiving %u datagrams\n", o.count);
    std::fflush(stdout); // the receives are posted: a sender may start (tools/check waits for this line)
    std::vector<bool> seen(o.count, false);
    auto const deadline = std::chrono::steady_clock::now() + 60s;
    for (unsigned got = 0; got < o.count;) {
        if (std::chrono::steady_clock::now() > deadline) {
            std::fprintf(stderr, "mckey: only %u of %u datagrams came within 60 s\n", got, o.count);
            return 1;
        }
        for (auto const& wc : group.cq().poll<8>()) {
            wc.throw_if_error();
            auto const payload =
                std::span{in}.subspan(wc.wr_id() * slot + rx::ud::grh_bytes, wc.byte_len() - rx::ud::grh_bytes);
            auto const seq = static_cast<unsigned>(payload[0]);
            bool ok = payload.size() == o.size && seq < o.count && !seen[seq];
            for (std::size_t k = 0; ok && k < payload.size(); ++k)
                ok = payload[k] == pattern(k, seq);
            if (!ok) {
                std::fprintf(stderr, "mckey: datagram in slot %llu is not what was sent\n",
                             static_cast<unsigned long long>(wc.wr_id()));
                return 1;
            }
            seen[seq] = true;
            ++got;
        }
    }
    group.leave();
    std::printf("mckey: received %u datagrams of %zu bytes intact\n", o.count, o.size);
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    options o;
    for (int c; (c = ::getopt(argc, argv, "b:m:sC:S:")) != -1;) {
        switch (c) {
        case 'b':
            o.bind = optarg;
            break;
        case 'm':
            o.group = optarg;
            break;
        case 's':
            o.sender = true;
            break;
        case 'C':
            o.count = static_cast<unsigned>(std::strtoul(optarg, nullptr, 0));
            break;
        case 'S':
            o.size = std::strtoul(optarg, nullptr, 0);
            break;
        default:
            o.bind.clear();
            optind = argc;
            break;
        }
    }
    if (o.bind.empty() || o.count == 0 || o.count > 256) {
        std::fprintf(stderr, "usage: %s -b local_address [-s] [-m group] [-C count (1-256)] [-S size]\n", argv[0]);
        return 2;
    }
    try {
        return run(o);
    } catch (rx::error const& e) {
        e.dump_detailed(std::cerr, "mckey:", 2);
    } catch (std::exception const& e) {
        std::fprintf(stderr, "mckey: %s\n", e.what());
    }
    return 1;
}
