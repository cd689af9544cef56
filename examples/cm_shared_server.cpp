// cm_shared_server: an RDMA CM server on shared resources, the way servers are written.
//
// One listener, one protection domain, ONE registered buffer, one SRQ and one CQ on one
// completion channel serve every client. One thread runs an epoll loop over two descriptors:
// the CM engine's event channel (connect requests, established, disconnected: `engine.process()`
// advances every handshake and notices every dead peer, no thread per connection) and the
// completion channel. Each connection is accepted on `cm::resources` without blocking
// (`cm::accept(engine, request, opt, cm::shared_qp<rx::rc>(resources), …)`) and only borrows
// them; each message that lands in the SRQ is checked and answered from the same registration; a
// receive is posted again once its answer's send completed. Clients (in this process, each a
// self-contained CM connection) keep a window of messages in flight and check every answer byte
// for byte.
//
// With -d blocking the same server accepts with the blocking driver instead: one accept thread
// (`listener.get_request`, then `request.accept` on the same shared resources) and, as every
// blocking connection has, a monitor thread per connection on its own CM channel; the epoll loop
// keeps the completions, and reaps the connections whose peer went. For comparison: threads and
// descriptors then grow with the clients (two descriptors per connection: it raises its limit of
// open files to the hard limit), and return to their count once they have gone.
//
// Usage: cm_shared_server -b address [-p port] [-c clients] [-n messages] [-r cycles] [-d driver]
//        cm_shared_server -m server -b address -p port -w clients [-n messages] [-t seconds] [-d driver]
//        cm_shared_server -m client -b server-address -p port -c clients [-i first-id] [-n messages]
//   -b  the IP address of the RDMA device to listen on (and connect to)
//   -c  concurrent clients (32), -n  messages per client (100)
//   -r  connect/disconnect cycles after the exchange (0)
//   -m server: serve only, on this thread alone, until -w clients (from any number of client
//      processes, on other nodes) have connected and had every message answered ("ready: …"),
//      then until every one of them has gone; SIGUSR1 marks when they were killed (the time to
//      notice them all is measured from it); SIGUSR2 (or 60 s) ends the program once they have
//      gone ("gone: …"). Prints connections per second, memory, threads and descriptors.
//      At most -t seconds (600) in all.
//   -m client: -c clients (ids from -i), each a connection of its own, exchange -n messages
//      each, print "clients done", then hold their connections until killed (or 600 s).
//   -d  the CM driver of the server: engine (the default) or blocking
//   -a  ACK timeout in ms of every QP (default 67 ms, which with 6 retries gives up on a silent
//      peer after about 470 ms), and an RNR back-off of a tenth of it (at most 491.52 ms; default
//      1.28 ms): tools/nodes-wire gives 1,000 connections on emulated nodes of a loaded host more.
#include "rdmacxx/rdmacxx.hpp"

#include "server_modes.hpp"

#include <getopt.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t msg_bytes = 64;
constexpr std::uint32_t window = 4; // a client's messages in flight

// The connection settings of every connection, the server's and the clients': the defaults,
// or with -a a longer ACK timeout for runs on an overloaded host (see the usage).
cm::connection_options options; // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

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
    // Room for `clients` clients' windows in the SRQ (at least 256 receives), each receive with
    // the slot its answer goes out from.
    server(cm::address const& local, std::uint32_t clients, bool blocking = false)
        : slots_(std::max<std::uint32_t>(256, clients * window)),
          listener_(blocking ? cm::listener<rx::rc>{local, cm::listener_options{.backlog = 1024}}
                             : cm::listener<rx::rc>{engine_,
                                                    local,
                                                    {.backlog = 1024},
                                                    [this](cm::connect_request req) { accept(std::move(req)); }}),
          pd_(listener_.cm_id().context()), channel_(listener_.cm_id().context()),
          cq_(listener_.cm_id().context(), static_cast<int>(2 * slots_ + 64), channel_), srq_(pd_, slots_),
          memory_(2 * std::size_t{slots_} * msg_bytes),
          mr_(pd_.register_memory(std::span{memory_}, rx::access::local_write)) {
        for (std::uint32_t i = 0; i < slots_; ++i)
            srq_.post_recv(rx::recv{slot(i)}.id(i));
        channel_.set_nonblocking();
        cq_.arm();
        if (blocking) accepter_ = std::jthread{[this](std::stop_token const& stop) { accept_blocking(stop); }};
    }

    [[nodiscard]] std::uint16_t port() const noexcept { return listener_.port(); }
    [[nodiscard]] std::size_t open() const noexcept { return open_.load(); }
    [[nodiscard]] std::size_t accepted() const noexcept { return accepted_.load(); }
    [[nodiscard]] std::uint64_t answered() const noexcept { return answered_.load(); }
    [[nodiscard]] std::size_t registered_bytes() const noexcept { return memory_.size(); }
    // When the first connect request came, and when the last connection was established.
    [[nodiscard]] std::chrono::steady_clock::time_point first_request() const noexcept { return first_request_; }
    [[nodiscard]] std::chrono::steady_clock::time_point last_established() const noexcept { return last_established_; }

    // The epoll loop, until `stop`.
    void run(std::atomic<bool> const& stop) {
        run_until([&] { return stop.load(); });
    }
    // The epoll loop, until `done()` (asked every 20 ms at most).
    template <class Done>
    void run_until(Done&& done) {
        int const ep = ::epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0) throw std::runtime_error("epoll_create1 failed");
        for (int fd : {engine_.fd(), channel_.fd()}) {
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.fd = fd;
            if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) throw std::runtime_error("epoll_ctl failed");
        }
        while (!done()) {
            std::array<epoll_event, 2> ready{};
            // At most 20 ms (to see `stop`), less when a handshake's deadline comes sooner.
            int const wait = engine_.poll_timeout() < 0 ? 20 : std::min(engine_.poll_timeout(), 20);
            int const n = ::epoll_wait(ep, ready.data(), 2, wait);
            for (int k = 0; k < n; ++k)
                if (ready[static_cast<std::size_t>(k)].data.fd == channel_.fd()) completions();
            engine_.process(); // CM events, and the handshakes whose deadline passed
            if (accepter_.joinable()) take_blocking();
        }
        ::close(ep);
    }

private:
    using connection = cm::connection<rx::rc, rx::event_driven>;

    rx::local_span<std::byte> slot(std::uint32_t i) {
        return mr_.span().subspan(std::size_t{i} * msg_bytes, msg_bytes);
    }

    // A connect request, from engine_.process(): accepted on the shared resources without
    // blocking. Its QP is known (`qps_`) from before the accept is sent, since a client may send
    // the moment it is connected, before the server's `established` is processed; the connection
    // comes back once established. One client's failure (a vanished client, a refused QP, an
    // accept timing out) is that client's only.
    void accept(cm::connect_request req) {
        if (first_request_ == std::chrono::steady_clock::time_point{})
            first_request_ = std::chrono::steady_clock::now();
        auto const qpn = std::make_shared<std::uint32_t>(0); // shared by the two callbacks
        cm::accept<rx::rc, rx::event_driven>(
            engine_, std::move(req), options, cm::shared_qp<rx::rc>(shared()),
            [this, qpn](connection& c) {
                *qpn = c.qp().qp_num();
                note(c);
            },
            [this, qpn](std::exception_ptr const& error, std::optional<connection> c) {
                if (error) {
                    forget(*qpn);
                    return report(error);
                }
                auto owned = std::make_unique<connection>(std::move(*c));
                // The peer left or died: its QP is in ERR (its flushed completions, if any, stay
                // in the CQ: see below); forget it.
                owned->on_end([this, n = *qpn](cm::connection_state) {
                    forget(n);
                    by_qpn_.erase(n);
                    open_ = by_qpn_.size();
                });
                by_qpn_[*qpn] = std::move(owned);
                open_ = by_qpn_.size();
                ++accepted_;
                last_established_ = std::chrono::steady_clock::now();
            });
    }

    // The QP of a connection being accepted, known before the accept is sent (a client may send
    // the moment it is connected, before the connection comes back).
    void note(connection& c) {
        qps_[c.qp().qp_num()] = &c.qp(); // the QP stays where it is when the connection moves
    }
    void forget(std::uint32_t qpn) { qps_.erase(qpn); }

    // -d blocking, on the accept thread: the next request (at most 100 ms, to see `stop`),
    // accepted with the blocking call; the connection, or the failure, handed to the loop's
    // thread. No QP crosses threads before the accept returned: messages that land meanwhile
    // wait in `pending_` (keyed by QPN, noted in before_accept) until the loop owns the
    // connection, or post their receive again when the accept failed.
    void accept_blocking(std::stop_token const& stop) {
        while (!stop.stop_requested()) {
            std::optional<cm::connect_request> req;
            try {
                req.emplace(listener_.get_request(100ms));
            } catch (cm::timeout_error const&) {
                continue;
            } catch (std::exception const&) {
                report(std::current_exception());
                continue;
            }
            std::uint32_t qpn = 0;
            try {
                auto c = req->accept(options, cm::shared_qp<rx::rc>(shared()), [this, &qpn](connection& n) {
                    qpn = n.qp().qp_num();
                    std::lock_guard lock{inbox_mutex_};
                    (void)pending_[qpn];
                });
                std::lock_guard lock{inbox_mutex_};
                inbox_.emplace_back(qpn, std::move(c));
            } catch (std::exception const&) { // that client's failure only (std::system_error: no thread)
                report(std::current_exception());
                std::lock_guard lock{inbox_mutex_};
                if (qpn != 0) failed_.push_back(qpn);
            }
        }
    }
    // -d blocking, on the loop's thread: the connections accepted meanwhile are kept (and the
    // messages that waited for them answered); those whose peer went (their monitor thread moved
    // the QP to ERR) are destroyed, after the completions already in the CQ were taken.
    void take_blocking() {
        std::vector<std::pair<std::uint32_t, std::uint32_t>> waited; // (QPN, slot)
        {
            std::lock_guard lock{inbox_mutex_};
            for (auto& [qpn, c] : inbox_) {
                if (first_request_ == std::chrono::steady_clock::time_point{})
                    first_request_ = std::chrono::steady_clock::now();
                auto& owned = by_qpn_[qpn] = std::make_unique<connection>(std::move(c));
                note(*owned);
                for (std::uint32_t i : pending_[qpn])
                    waited.emplace_back(qpn, i);
                pending_.erase(qpn);
                ++accepted_;
                last_established_ = std::chrono::steady_clock::now();
            }
            inbox_.clear();
            for (std::uint32_t qpn : failed_) {
                for (std::uint32_t i : pending_[qpn])
                    srq_.post_recv(rx::recv{slot(i)}.id(i));
                pending_.erase(qpn);
            }
            failed_.clear();
        }
        for (auto [qpn, i] : waited)
            answer(*qps_.at(qpn), i);
        std::vector<std::uint32_t> dead;
        for (auto const& [qpn, c] : by_qpn_)
            if (c->state() != cm::connection_state::established) dead.push_back(qpn);
        if (!dead.empty()) {
            completions(); // what those connections received before they ended
            for (std::uint32_t qpn : dead) {
                forget(qpn);
                by_qpn_.erase(qpn);
            }
        }
        open_ = by_qpn_.size();
    }

    [[nodiscard]] cm::resources<rx::event_driven> shared() {
        return {.pd = pd_, .send_cq = cq_, .recv_cq = cq_, .srq = &srq_, .channel = &channel_};
    }

    static void report(std::exception_ptr const& error) {
        try {
            std::rethrow_exception(error);
        } catch (std::exception const& e) {
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
                auto const i = static_cast<std::uint32_t>(wc.wr_id() % slots_);
                if (wc.wr_id() >= slots_) { // an answer sent, or flushed with its connection
                    srq_.post_recv(rx::recv{slot(i)}.id(i));
                    continue;
                }
                wc.throw_if_error();
                auto const msg = std::span<std::byte const>{memory_}.subspan(std::size_t{i} * msg_bytes, wc.byte_len());
                std::uint32_t client = 0, seq = 0;
                std::memcpy(&client, msg.data(), 4);
                std::memcpy(&seq, msg.data() + 4, 4);
                if (!is_message(msg, client, seq, false)) throw std::runtime_error("a message arrived corrupt");
                if (auto it = qps_.find(wc.qp_num()); it != qps_.end()) {
                    answer(*it->second, i);
                    continue;
                }
                if (accepter_.joinable()) { // -d blocking: a connection the loop does not own yet
                    std::lock_guard lock{inbox_mutex_};
                    if (auto p = pending_.find(wc.qp_num()); p != pending_.end()) {
                        p->second.push_back(i);
                        continue;
                    }
                }
                throw std::runtime_error("a message from an unknown QP");
            }
        }
    }

    // Answers the message in slot `i` on `qp`, from the slot's twin.
    void answer(rx::queue_pair<rx::rc, rx::event_driven>& qp, std::uint32_t i) {
        auto const msg = std::span<std::byte const>{memory_}.subspan(std::size_t{i} * msg_bytes, msg_bytes);
        std::uint32_t client = 0, seq = 0;
        std::memcpy(&client, msg.data(), 4);
        std::memcpy(&seq, msg.data() + 4, 4);
        make_message(std::span{memory_}.subspan((std::size_t{slots_} + i) * msg_bytes, msg_bytes), client, seq, true);
        qp.post(rx::send{slot(slots_ + i)}.id(slots_ + i));
        ++answered_;
    }

    std::uint32_t slots_;
    cm::engine engine_;
    cm::listener<rx::rc> listener_;
    rx::protection_domain pd_;
    rx::completion_channel channel_;
    rx::completion_queue<rx::event_driven> cq_;
    rx::shared_receive_queue srq_;
    std::vector<std::byte> memory_;
    rx::memory_region mr_;
    std::map<std::uint32_t, std::unique_ptr<connection>> by_qpn_;
    std::map<std::uint32_t, rx::queue_pair<rx::rc, rx::event_driven>*> qps_; // the loop's thread only
    std::atomic<std::size_t> open_{0};
    std::atomic<std::size_t> accepted_{0};
    std::atomic<std::uint64_t> answered_{0};
    std::chrono::steady_clock::time_point first_request_{}, last_established_{};
    std::mutex inbox_mutex_; // -d blocking: what the accept thread hands to the loop's thread
    std::vector<std::pair<std::uint32_t, connection>> inbox_;
    std::vector<std::uint32_t> failed_;                           // QPNs whose accept failed
    std::map<std::uint32_t, std::vector<std::uint32_t>> pending_; // slots waiting for their QPN
    std::jthread accepter_; // -d blocking; stopped (and joined) before anything else goes
};

// A client: a self-contained connection with `window` messages in flight.
struct client {
    client(cm::address const& a, std::uint32_t id_, std::uint32_t total_)
        : conn(cm::connect<rx::rc, rx::busy_poll>(a, options)), id(id_), total(total_),
          memory(2 * std::size_t{window} * msg_bytes),
          mr(conn.pd().register_memory(std::span{memory}, rx::access::local_write)) {
        for (std::uint32_t w = 0; w < window; ++w)
            conn.qp().post_recv(rx::recv{mr.span().subspan(w * msg_bytes, msg_bytes)}.id(w));
    }
    // Sends what the window allows and takes what completed; true once every answer came.
    // `moved` says whether anything was sent or completed.
    bool step(bool& moved) {
        while (sent < total && sent - answers < window && !busy[sent % window]) {
            moved = true;
            std::uint32_t const s = sent % window;
            make_message(std::span{memory}.subspan((window + s) * msg_bytes, msg_bytes), id, sent, false);
            conn.qp().post(rx::send{mr.span().subspan((window + s) * msg_bytes, msg_bytes)}.id(window + s));
            busy[s] = true;
            ++sent;
        }
        for (auto const& wc : conn.cq().poll<8>()) {
            moved = true;
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

// Runs every client's exchange to its end, within 120 s. A pass in which nothing moved sleeps
// 100 µs: clients spinning on a one-CPU node would starve the kernel threads (Soft-RoCE's among
// them) that carry their packets.
void exchange(std::vector<std::unique_ptr<client>>& clients) {
    auto const deadline = std::chrono::steady_clock::now() + 120s;
    for (;;) {
        bool all = true, moved = false;
        for (auto& c : clients)
            all = c->step(moved) && all;
        if (all) return;
        if (!moved) std::this_thread::sleep_for(100us);
        if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("the clients did not finish");
    }
}

double since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

volatile std::sig_atomic_t killed = 0; // SIGUSR1: the clients were killed
volatile std::sig_atomic_t leave = 0;  // SIGUSR2: the program may end

// -m server: serves `expected` clients of `messages` each on this thread alone (see the usage).
int serve(cm::address const& where, std::uint32_t expected, std::uint32_t messages, std::chrono::seconds limit,
          bool blocking) {
    std::signal(SIGUSR1, [](int) { killed = 1; });
    std::signal(SIGUSR2, [](int) { leave = 1; });
    auto const deadline = std::chrono::steady_clock::now() + limit;
    auto const out_of_time = [&] { return std::chrono::steady_clock::now() > deadline; };
    server srv{where, expected, blocking};
    std::size_t const threads0 = server_modes::threads(), fds0 = server_modes::descriptors();
    long const rss0 = server_modes::rss_kib();
    std::printf("listening on %s: %zu thread(s), %zu descriptors, RSS %ld KiB\n", where.to_string().c_str(), threads0,
                fds0, rss0);
    std::fflush(stdout);
    std::uint64_t const want = std::uint64_t{expected} * messages;
    std::size_t threads_max = threads0, fds_max = fds0;
    auto const watch = [&] {
        threads_max = std::max(threads_max, server_modes::threads());
        fds_max = std::max(fds_max, server_modes::descriptors());
        return out_of_time();
    };
    srv.run_until([&] { return watch() || (srv.accepted() >= expected && srv.answered() >= want); });
    if (srv.answered() < want) {
        std::fprintf(stderr,
                     "cm_shared_server: %zu of %u clients connected, %llu of %llu messages answered in %lld s\n",
                     srv.accepted(), expected, static_cast<unsigned long long>(srv.answered()),
                     static_cast<unsigned long long>(want), static_cast<long long>(limit.count()));
        return 1;
    }
    double const connect_s = std::chrono::duration<double>(srv.last_established() - srv.first_request()).count();
    long const rss1 = server_modes::rss_kib();
    std::printf("ready: %zu connections open, %llu messages answered and verified; %zu connections in %.3f s "
                "(%.0f per second); RSS %ld KiB (%.1f KiB per connection above the listening server), %zu bytes "
                "registered in all; %zu thread(s), %zu descriptors\n",
                srv.open(), static_cast<unsigned long long>(srv.answered()), srv.accepted(), connect_s,
                static_cast<double>(srv.accepted()) / connect_s, rss1,
                static_cast<double>(rss1 - rss0) / static_cast<double>(srv.accepted()), srv.registered_bytes(),
                server_modes::threads(), server_modes::descriptors());
    std::fflush(stdout);
    std::chrono::steady_clock::time_point killed_at{};
    srv.run_until([&] {
        if (killed != 0 && killed_at == std::chrono::steady_clock::time_point{})
            killed_at = std::chrono::steady_clock::now();
        return watch() || srv.open() == 0;
    });
    if (srv.open() != 0) {
        std::fprintf(stderr, "cm_shared_server: %zu connections still open after %lld s\n", srv.open(),
                     static_cast<long long>(limit.count()));
        return 1;
    }
    double const notice_s = killed_at == std::chrono::steady_clock::time_point{} ? -1 : since(killed_at);
    std::printf("gone: all %zu clients noticed %.3f s after SIGUSR1; %zu thread(s), %zu descriptors (%zu and %zu "
                "at most), RSS %ld KiB\n",
                srv.accepted(), notice_s, server_modes::threads(), server_modes::descriptors(), threads_max, fds_max,
                server_modes::rss_kib());
    std::fflush(stdout);
    auto const until = std::chrono::steady_clock::now() + 60s;
    srv.run_until([&] { return leave != 0 || std::chrono::steady_clock::now() > until || out_of_time(); });
    // The engine: one thread and the same descriptors throughout. Blocking: a monitor thread and
    // a CM channel per connection while it lives, none once they have gone.
    bool const constant = (blocking || threads_max == threads0) && server_modes::threads() == threads0 &&
                          server_modes::descriptors() == fds0;
    if (!constant) std::fprintf(stderr, "cm_shared_server: threads or descriptors not back at their count\n");
    return constant ? 0 : 1;
}

// -m client: `count` clients with ids from `first`, `messages` each; then holds them until killed.
int clients_only(cm::address const& where, std::uint32_t count, std::uint32_t first, std::uint32_t messages) {
    std::vector<std::unique_ptr<client>> clients;
    for (std::uint32_t i = 0; i < count; ++i)
        clients.push_back(std::make_unique<client>(where, first + i, messages));
    exchange(clients);
    std::printf("clients done: %u clients from id %u, %u messages each, every answer verified\n", count, first,
                messages);
    std::fflush(stdout);
    std::this_thread::sleep_for(600s); // killed before
    return 0;
}

} // namespace

int main(int argc, char** argv) try {
    std::string bind;
    std::uint16_t port = 0;
    std::uint32_t n_clients = 32, n_messages = 100, cycles = 0;
    server_modes::options modes;
    bool blocking = false; // -d
    for (int c; (c = ::getopt(argc, argv, (std::string{"b:p:c:n:r:d:"} + server_modes::letters).c_str())) != -1;) {
        if (server_modes::take(c, optarg, modes)) continue;
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
        case 'd':
            if (std::string{optarg} != "engine" && std::string{optarg} != "blocking") {
                std::cerr << "cm_shared_server: -d is engine or blocking\n";
                return 2;
            }
            blocking = std::string{optarg} == "blocking";
            break;
        default:
            std::cerr << "usage: cm_shared_server -b address [-p port] [-c clients] [-n messages] [-r cycles] "
                         "[-d driver]\n"
                         "       cm_shared_server -m server -b address -p port -w clients [-n messages] [-t s] "
                         "[-d driver]\n"
                         "       cm_shared_server -m client -b address -p port -c clients [-i first] [-n messages]\n";
            return 2;
        }
    }
    if (bind.empty()) {
        std::cerr << "cm_shared_server: -b address (the RDMA device's IP address) is required\n";
        return 2;
    }
    if (modes.ack_timeout.count() > 0) {
        options.settings.local_ack_timeout = modes.ack_timeout;
        // The same patience for a receiver that falls behind (the server's SRQ refilled late on a
        // starved node): its RNR NAKs ask for a back-off of a tenth of the ACK timeout, at most
        // the IB table's 491.52 ms, 6 times over.
        options.settings.min_rnr_timer =
            std::min<std::chrono::microseconds>(modes.ack_timeout / 10, std::chrono::microseconds{491520});
    }
    if (blocking) { // two descriptors per connection (its CM channel, its monitor's eventfd): the soft
                    // limit of 1,024 ends near 500 connections; take the hard limit
        rlimit files{};
        if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
            files.rlim_cur = files.rlim_max;
            (void)::setrlimit(RLIMIT_NOFILE, &files);
        }
    }
    std::string const& mode = modes.mode;
    if (mode == "server") {
        if (modes.expected == 0 || port == 0) {
            std::cerr << "cm_shared_server: -m server needs -p port and -w clients\n";
            return 2;
        }
        return serve(cm::address::resolve(bind, port), modes.expected, n_messages, modes.limit, blocking);
    }
    if (mode == "client") return clients_only(cm::address::resolve(bind, port), n_clients, modes.first_id, n_messages);
    if (!mode.empty()) {
        std::cerr << "cm_shared_server: -m is server or client\n";
        return 2;
    }
    server srv{cm::address::resolve(bind, port), n_clients, blocking};
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
