// epoll_server: one thread serves several RC queue pairs from one epoll loop.
//
// The server's QPs all complete into event-driven CQs bound to ONE completion channel, whose
// non-blocking descriptor sits in an epoll set. Each wake-up takes the pending CQ events,
// acknowledges them through their CQs, re-arms, drains every completion, and echoes each message
// back on the QP it came from. Clients (here in the same process, on the same device, each with
// its own QP) send -n messages each and check every echo byte for byte.
//
// Usage: epoll_server [-d device] [-i ib-port] [-c clients] [-n messages] [-s size]
#include "rdmacxx/rdmacxx.hpp"

#include <getopt.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;

namespace {

struct options {
    std::string device;
    std::uint8_t ib_port = 1;
    unsigned clients = 4;
    unsigned messages = 200;
    std::size_t size = 256;
};

using server_qp = rx::queue_pair<rx::rc, rx::event_driven>;
using client_qp = rx::queue_pair<rx::rc, rx::busy_poll>;

int run(options const& opt) {
    rx::device_list const devices;
    if (devices.empty()) throw std::runtime_error("no RDMA device found");
    rx::context ctx = opt.device.empty() ? devices[0].open() : devices.find(opt.device).open();
    rx::end_port const port(ctx, opt.ib_port);
    rx::protection_domain pd(ctx);

    // Server side: one channel, one CQ per connection (so each CQ's events say which QP).
    rx::completion_channel channel(ctx);
    channel.set_nonblocking();
    std::size_t const n = opt.clients;
    std::vector<std::byte> server_mem(n * opt.size), client_out(n * opt.size), client_in(n * opt.size);
    auto server_mr = pd.register_memory(std::span{server_mem}, rx::access::local_write);
    auto out_mr = pd.register_memory(std::span{client_out}, rx::access::local_write);
    auto in_mr = pd.register_memory(std::span{client_in}, rx::access::local_write);
    std::vector<std::unique_ptr<rx::completion_queue<rx::event_driven>>> server_cqs;
    std::vector<std::unique_ptr<server_qp>> servers;
    std::vector<std::unique_ptr<rx::completion_queue<rx::busy_poll>>> client_cqs;
    std::vector<std::unique_ptr<client_qp>> clients;
    for (std::size_t i = 0; i < n; ++i) {
        server_cqs.push_back(std::make_unique<rx::completion_queue<rx::event_driven>>(ctx, 16, channel));
        servers.push_back(std::make_unique<server_qp>(pd, *server_cqs[i], *server_cqs[i]));
        client_cqs.push_back(std::make_unique<rx::completion_queue<rx::busy_poll>>(ctx, 16));
        clients.push_back(std::make_unique<client_qp>(pd, *client_cqs[i], *client_cqs[i]));
        servers[i]->connect(port, clients[i]->local_endpoint(port));
        clients[i]->connect(port, servers[i]->local_endpoint(port));
        servers[i]->post_recv(rx::recv{server_mr.span().subspan(i * opt.size, opt.size)}.id(i));
        server_cqs[i]->arm();
    }

    int const ep = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) throw std::runtime_error("epoll_create1 failed");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = channel.fd();
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, channel.fd(), &ev) != 0) throw std::runtime_error("epoll_ctl failed");

    // Clients: each its own thread, sending and checking echoes.
    std::vector<unsigned> good(n, 0);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < n; ++i)
        threads.emplace_back([&, i] {
            auto const out = out_mr.span().subspan(i * opt.size, opt.size);
            auto const in = in_mr.span().subspan(i * opt.size, opt.size);
            for (unsigned m = 0; m < opt.messages; ++m) {
                for (std::size_t k = 0; k < opt.size; ++k)
                    out[k] = static_cast<std::byte>((k + std::size_t{m} * 3 + i * 101) & 0xff);
                clients[i]->post_recv(rx::recv{in}.id(1));
                clients[i]->post(rx::send{out}.id(2));
                for (int done = 0; done < 2; ++done)
                    client_cqs[i]->wait_one().throw_if_error();
                if (std::memcmp(out.data(), in.data(), opt.size) == 0) ++good[i];
            }
        });

    // The server loop: one epoll set, one channel, every connection.
    std::size_t const total = n * opt.messages;
    std::size_t echoed = 0, wakeups = 0;
    std::vector<unsigned> echoes_per_qp(n, 0);
    while (echoed < total) {
        epoll_event ready{};
        int const r = ::epoll_wait(ep, &ready, 1, 10000);
        if (r == 0) throw std::runtime_error("no completion event for 10 s");
        if (r < 0) continue;
        ++wakeups;
        while (ibv_cq* fired = channel.get_event()) { // every pending event, then re-arm and drain
            for (std::size_t i = 0; i < n; ++i) {
                if (server_cqs[i]->native_handle() != fired) continue;
                server_cqs[i]->note_event();
                server_cqs[i]->arm();
                std::array<rx::work_completion, 8> wcs;
                while (std::size_t got = server_cqs[i]->poll(std::span{wcs})) {
                    for (std::size_t k = 0; k < got; ++k) {
                        wcs[k].throw_if_error();
                        if (!wcs[k].is_recv()) continue; // an echo's send completion
                        auto const slot = server_mr.span().subspan(i * opt.size, opt.size);
                        // Re-post the receive before echoing: the client sends again on the echo.
                        // The echo has left the slot once the client has it, before it sends again.
                        servers[i]->post_recv(rx::recv{slot}.id(i));
                        servers[i]->post(rx::send{slot}.id(100 + i));
                        ++echoed;
                        ++echoes_per_qp[i];
                    }
                }
            }
        }
    }
    for (auto& t : threads)
        t.join();
    ::close(ep);
    unsigned all_good = 0;
    for (std::size_t i = 0; i < n; ++i) {
        std::printf("  QP %u: %u echoes, %u of %u checked intact\n", servers[i]->qp_num(), echoes_per_qp[i], good[i],
                    opt.messages);
        all_good += good[i];
    }
    std::printf("epoll_server on %s: %zu connections, %zu echoes of %zu bytes from one epoll loop in %zu wake-ups\n",
                port.to_string().c_str(), n, echoed, opt.size, wakeups);
    return all_good == total ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    options opt;
    try {
        for (int c; (c = ::getopt(argc, argv, "d:i:c:n:s:h")) != -1;) {
            switch (c) {
            case 'd':
                opt.device = optarg;
                break;
            case 'i':
                opt.ib_port = static_cast<std::uint8_t>(std::stoul(optarg));
                break;
            case 'c':
                opt.clients = static_cast<unsigned>(std::stoul(optarg));
                break;
            case 'n':
                opt.messages = static_cast<unsigned>(std::stoul(optarg));
                break;
            case 's':
                opt.size = std::stoul(optarg);
                break;
            default:
                std::printf("usage: %s [-d device] [-i ib-port] [-c clients] [-n messages] [-s size]\n", argv[0]);
                return c == 'h' ? 0 : 1;
            }
        }
        if (opt.clients == 0 || opt.messages == 0 || opt.size == 0)
            throw rx::argument_error("-c, -n and -s must be positive");
        return run(opt);
    } catch (rx::error const& e) {
        e.dump_detailed(std::cerr, "E:", 2);
    } catch (std::exception const& e) {
        std::cerr << "E: " << e.what() << '\n';
    }
    return 1;
}
