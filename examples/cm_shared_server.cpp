// cm_shared_server: an RDMA CM server on shared resources, the way servers are written.
//
// One listener, one protection domain, ONE registered buffer, one SRQ and one CQ on one
// completion channel serve every client. One thread runs an epoll loop over two descriptors:
// the CM engine's event channel (connect requests, established, disconnected: `engine.process()`
// advances every handshake and notices every dead peer, no thread per connection) and the
// completion channel. Each connection is accepted on `cm::resources` without blocking
// (`cm::accept(engine, request, resources, …)`) and only borrows them; each message that lands
// in the SRQ is checked and answered from the same registration; a receive is posted again once
// its answer's send completed. Clients (in this process, each a self-contained CM connection)
// keep a window of messages in flight and check every answer byte for byte.
//
// Usage: cm_shared_server -b address [-p port] [-c clients] [-n messages] [-r cycles]
//   -b  the IP address of the RDMA device to listen on (and connect to)
//   -c  concurrent clients (32), -n  messages per client (100)
//   -r  connect/disconnect cycles after the exchange (0)
#include "rdmacxx/rdmacxx.hpp"

#include <getopt.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t msg_bytes = 64;
constexpr std::uint32_t slots = 256; // SRQ receives, each with the slot its answer goes out from

// Message `seq` of client `client`: its numbers, then a pattern; an answer inverts the pattern.
void make_message(std::span<std::byte> m, std::uint32_t client, std::uint32_t seq, bool answer) {
    std::memcpy(m.data(), &client, 4);
    std::memcpy(m.data() + 4, &seq, 4);
    for (std::size_t i = 8; i < m.size(); ++i) {
        auto const b = static_cast<std::uint8_t>((i * 13 + std::size_t{client} * 7 + std::size_t{seq} * 3) & 0xff);
        m[i] = static_cast<std::byte>(answer ? static_cast<std::uint8_t>(~b) : b);
    }
}
bool is_message(std::span<std::byte const> m, std::uint32_t client, std::uint32_t seq, bool answer) {
    std::array<std::byte, msg_bytes> want{};
    make_message(want, client, seq, answer);
    return m.size() == msg_bytes && std::memcmp(m.data(), want.data(), msg_bytes) == 0;
}

class server {
public:
    explicit server(cm::address const& local)
        : listener_(engine_, local, {.backlog = 64}, [this](cm::connect_request req) { accept(std::move(req)); }),
          pd_(listener_.cm_id().context()), channel_(listener_.cm_id().context()),
          cq_(listener_.cm_id().context(), 2048, channel_), srq_(pd_, slots),
          memory_(2 * std::size_t{slots} * msg_bytes),
          mr_(pd_.register_memory(std::span{memory_}, rx::access::local_write)) {
        for (std::uint32_t i = 0; i < slots; ++i)
            srq_.post_recv(rx::recv{slot(i)}.id(i));
        channel_.set_nonblocking();
        cq_.arm();
    }

    [[nodiscard]] std::uint16_t port() const noexcept { return listener_.port(); }
    [[nodiscard]] std::size_t open() const noexcept { return open_.load(); }
    [[nodiscard]] std::uint64_t answered() const noexcept { return answered_.load(); }

    // The epoll loop, until `stop`.
    void run(std::atomic<bool> const& stop) {
        int const ep = ::epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0) throw std::runtime_error("epoll_create1 failed");
        for (int fd : {engine_.fd(), channel_.fd()}) {
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.fd = fd;
            if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) throw std::runtime_error("epoll_ctl failed");
        }
        while (!stop) {
            std::array<epoll_event, 2> ready{};
            // At most 20 ms (to see `stop`), less when a handshake's deadline comes sooner.
            int const wait = engine_.poll_timeout() < 0 ? 20 : std::min(engine_.poll_timeout(), 20);
            int const n = ::epoll_wait(ep, ready.data(), 2, wait);
            for (int k = 0; k < n; ++k)
                if (ready[static_cast<std::size_t>(k)].data.fd == channel_.fd()) completions();
            engine_.process(); // CM events, and the handshakes whose deadline passed
        }
        ::close(ep);
    }

private:
    using connection = cm::connection<rx::rc, rx::event_driven>;

    rx::local_span<std::byte> slot(std::uint32_t i) { return mr_.span().subspan(i * msg_bytes, msg_bytes); }

    // A connect request, from engine_.process(): accepted on the shared resources without
    // blocking. Its QP is known (`qps_`) from before the accept is sent, since a client may send
    // the moment it is connected, before the server's `established` is processed; the connection
    // comes back once established. One client's failure (a vanished client, a refused QP, an
    // accept timing out) is that client's only.
    void accept(cm::connect_request req) {
        cm::resources<rx::event_driven> const shared{
            .pd = pd_, .send_cq = cq_, .recv_cq = cq_, .srq = &srq_, .channel = &channel_};
        auto const qpn = std::make_shared<std::uint32_t>(0); // shared by the two callbacks
        cm::accept<rx::rc, rx::event_driven>(
            engine_, std::move(req), shared, {},
            [this, qpn](std::exception_ptr const& error, std::optional<connection> c) {
                if (error) {
                    qps_.erase(*qpn);
                    return report(error);
                }
                auto owned = std::make_unique<connection>(std::move(*c));
                // The peer left or died: its QP is in ERR (its flushed completions, if any, stay
                // in the CQ: see below); forget it.
                owned->on_end([this, n = *qpn](cm::connection_state) {
                    qps_.erase(n);
                    by_qpn_.erase(n);
                    open_ = by_qpn_.size();
                });
                by_qpn_[*qpn] = std::move(owned);
                open_ = by_qpn_.size();
            },
            [this, qpn](connection& c) {
                *qpn = c.qp().qp_num();
                qps_[*qpn] = &c.qp(); // the QP stays where it is when the connection moves
            });
    }

    static void report(std::exception_ptr const& error) {
        try {
            std::rethrow_exception(error);
        } catch (rx::error const& e) {
            std::fprintf(stderr, "cm_shared_server: a client's accept failed: %s\n", e.what());
        }
    }

    void completions() {
        while (ibv_cq* fired = channel_.get_event()) {
            (void)fired; // the one CQ
            cq_.note_event();
        }
        cq_.arm();
        for (auto batch = cq_.poll<16>(); !batch.empty(); batch = cq_.poll<16>()) {
            for (auto const& wc : batch) {
                auto const i = static_cast<std::uint32_t>(wc.wr_id() % slots);
                if (wc.wr_id() >= slots) { // an answer sent, or flushed with its connection
                    srq_.post_recv(rx::recv{slot(i)}.id(i));
                    continue;
                }
                wc.throw_if_error();
                auto const msg = std::span<std::byte const>{memory_}.subspan(i * msg_bytes, wc.byte_len());
                std::uint32_t client = 0, seq = 0;
                std::memcpy(&client, msg.data(), 4);
                std::memcpy(&seq, msg.data() + 4, 4);
                if (!is_message(msg, client, seq, false)) throw std::runtime_error("a message arrived corrupt");
                auto it = qps_.find(wc.qp_num());
                if (it == qps_.end()) throw std::runtime_error("a message from an unknown QP");
                make_message(std::span{memory_}.subspan((slots + i) * msg_bytes, msg_bytes), client, seq, true);
                it->second->post(rx::send{slot(slots + i)}.id(slots + i));
                ++answered_;
            }
        }
    }

    cm::engine engine_;
    cm::listener<rx::rc> listener_;
    rx::protection_domain pd_;
    rx::completion_channel channel_;
    rx::completion_queue<rx::event_driven> cq_;
    rx::shared_receive_queue srq_;
    std::vector<std::byte> memory_;
    rx::memory_region mr_;
    std::map<std::uint32_t, std::unique_ptr<connection>> by_qpn_;
    std::map<std::uint32_t, rx::queue_pair<rx::rc, rx::event_driven>*> qps_; // from before each accept
    std::atomic<std::size_t> open_{0};
    std::atomic<std::uint64_t> answered_{0};
};

// A client: a self-contained connection with `window` messages in flight.
struct client {
    static constexpr std::uint32_t window = 4;
    client(cm::address const& a, std::uint32_t id_, std::uint32_t total_)
        : conn(cm::connect<rx::rc, rx::busy_poll>(a)), id(id_), total(total_),
          memory(2 * std::size_t{window} * msg_bytes),
          mr(conn.pd().register_memory(std::span{memory}, rx::access::local_write)) {
        for (std::uint32_t w = 0; w < window; ++w)
            conn.qp().post_recv(rx::recv{mr.span().subspan(w * msg_bytes, msg_bytes)}.id(w));
    }
    bool step() {
        while (sent < total && sent - answers < window && !busy[sent % window]) {
            std::uint32_t const s = sent % window;
            make_message(std::span{memory}.subspan((window + s) * msg_bytes, msg_bytes), id, sent, false);
            conn.qp().post(rx::send{mr.span().subspan((window + s) * msg_bytes, msg_bytes)}.id(window + s));
            busy[s] = true;
            ++sent;
        }
        for (auto const& wc : conn.cq().poll<8>()) {
            wc.throw_if_error();
            if (!wc.is_recv()) {
                busy[wc.wr_id() - window] = false;
                continue;
            }
            auto const w = static_cast<std::uint32_t>(wc.wr_id());
            if (!is_message(std::span<std::byte const>{memory}.subspan(w * msg_bytes, wc.byte_len()), id, answers,
                            true))
                throw std::runtime_error("an answer arrived corrupt");
            ++answers;
            conn.qp().post_recv(rx::recv{mr.span().subspan(w * msg_bytes, msg_bytes)}.id(w));
        }
        return answers == total;
    }
    cm::connection<rx::rc, rx::busy_poll> conn;
    std::uint32_t id, total, sent = 0, answers = 0;
    std::array<bool, window> busy{};
    std::vector<std::byte> memory;
    rx::memory_region mr;
};

void exchange(std::vector<std::unique_ptr<client>>& clients) {
    auto const deadline = std::chrono::steady_clock::now() + 120s;
    for (;;) {
        bool all = true;
        for (auto& c : clients)
            all = c->step() && all;
        if (all) return;
        if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("the clients did not finish");
    }
}

double since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

int main(int argc, char** argv) try {
    std::string bind;
    std::uint16_t port = 0;
    std::uint32_t n_clients = 32, n_messages = 100, cycles = 0;
    for (int c; (c = ::getopt(argc, argv, "b:p:c:n:r:")) != -1;) {
        switch (c) {
        case 'b':
            bind = optarg;
            break;
        case 'p':
            port = static_cast<std::uint16_t>(std::stoul(optarg));
            break;
        case 'c':
            n_clients = static_cast<std::uint32_t>(std::stoul(optarg));
            break;
        case 'n':
            n_messages = static_cast<std::uint32_t>(std::stoul(optarg));
            break;
        case 'r':
            cycles = static_cast<std::uint32_t>(std::stoul(optarg));
            break;
        default:
            std::cerr << "usage: cm_shared_server -b address [-p port] [-c clients] [-n messages] [-r cycles]\n";
            return 2;
        }
    }
    if (bind.empty()) {
        std::cerr << "cm_shared_server: -b address (the RDMA device's IP address) is required\n";
        return 2;
    }
    server srv{cm::address::resolve(bind, port)};
    auto const where = cm::address::resolve(bind, srv.port());
    std::atomic<bool> stop{false};
    std::exception_ptr failure;
    std::thread loop{[&] {
        try {
            srv.run(stop);
        } catch (...) {
            failure = std::current_exception();
        }
    }};
    auto finish = [&] {
        stop = true;
        loop.join();
        if (failure) std::rethrow_exception(failure);
    };
    try {
        auto const t0 = std::chrono::steady_clock::now();
        std::vector<std::unique_ptr<client>> clients;
        for (std::uint32_t i = 0; i < n_clients; ++i)
            clients.push_back(std::make_unique<client>(where, i, n_messages));
        double const connect_s = since(t0);
        auto const t1 = std::chrono::steady_clock::now();
        exchange(clients);
        double const exchange_s = since(t1);
        for (auto& c : clients)
            c->conn.disconnect(20s);
        clients.clear();
        std::printf("%u clients on one PD, MR, SRQ and CQ: %llu messages answered and verified; connect %.3f s, "
                    "exchange %.3f s\n",
                    n_clients, static_cast<unsigned long long>(srv.answered()), connect_s, exchange_s);
        auto const t2 = std::chrono::steady_clock::now();
        for (std::uint32_t k = 0; k < cycles; ++k) {
            std::vector<std::unique_ptr<client>> one;
            one.push_back(std::make_unique<client>(where, n_clients + k, 1));
            exchange(one);
            one[0]->conn.disconnect(20s);
        }
        if (cycles != 0) std::printf("%u connect/disconnect cycles: %.3f s\n", cycles, since(t2));
        if (srv.answered() != std::uint64_t{n_clients} * n_messages + cycles)
            throw std::runtime_error("not every message was answered");
    } catch (...) {
        stop = true;
        loop.join();
        throw;
    }
    finish();
    return 0;
} catch (std::exception const& e) {
    std::cerr << "cm_shared_server: " << e.what() << '\n';
    return 1;
}
