// No heap on the fast path: the global operator new and delete are replaced by counting
// versions, and posting and polling loops of every work-request kind, with busy_poll and
// event_driven CQs, must not allocate once. Its own executable (alloc_tests), so that the
// replacement touches no other test.

#include "asio_net.hpp"
#include "fixture.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
// Set: the next allocation fails (operator new throws std::bad_alloc, aligned_alloc returns
// null), once.
std::atomic<bool> fail_next{false};

void* counted_alloc(std::size_t n, std::size_t align = 0) {
    if (fail_next.exchange(false, std::memory_order_relaxed)) return nullptr;
    if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
    if (n == 0) n = 1;
    if (align <= alignof(std::max_align_t)) return std::malloc(n);
    void* p = nullptr;
    return ::posix_memalign(&p, align, n) == 0 ? p : nullptr;
}
} // namespace

// Asio allocates its recycled handler, coroutine-frame and cancellation-slot memory with
// std::aligned_alloc (not operator new): replaced and counted too, so that no allocation escapes
// the count, and so that one can be made to fail.
extern "C" void* aligned_alloc(std::size_t align, std::size_t n) noexcept {
    return counted_alloc(n, align < sizeof(void*) ? sizeof(void*) : align);
}

// The replaceable allocation functions (all that a C++20 program may call). GCC cannot see that
// these deletes pair with the news above, both on malloc/free.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
    if (void* p = counted_alloc(n)) return p;
    throw std::bad_alloc{};
}
void* operator new[](std::size_t n) {
    if (void* p = counted_alloc(n)) return p;
    throw std::bad_alloc{};
}
void* operator new(std::size_t n, std::align_val_t a) {
    if (void* p = counted_alloc(n, static_cast<std::size_t>(a))) return p;
    throw std::bad_alloc{};
}
void* operator new[](std::size_t n, std::align_val_t a) {
    if (void* p = counted_alloc(n, static_cast<std::size_t>(a))) return p;
    throw std::bad_alloc{};
}
void* operator new(std::size_t n, std::nothrow_t const&) noexcept { return counted_alloc(n); }
void* operator new[](std::size_t n, std::nothrow_t const&) noexcept { return counted_alloc(n); }
void* operator new(std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
    return counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
    return counted_alloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete[](void* p, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, std::nothrow_t const&) noexcept { std::free(p); }

namespace rx = rdmacxx;

namespace {

// Counts the allocations made while it lives.
struct allocation_counter {
    allocation_counter() {
        allocations.store(0);
        counting.store(true);
    }
    ~allocation_counter() { counting.store(false); }
    allocation_counter(allocation_counter const&) = delete;
    allocation_counter& operator=(allocation_counter const&) = delete;
    [[nodiscard]] long count() const { return allocations.load(); }
};

// Takes `n` completions from `cq` by the strategy's wait (spins or sleeps); each must succeed.
template <class Completion>
bool take(rx::completion_queue<Completion>& cq, std::size_t n) {
    std::array<rx::work_completion, 16> wc;
    bool ok = true;
    while (n > 0) {
        std::size_t const got = cq.wait(std::span{wc}.first(std::min<std::size_t>(16, n)));
        for (std::size_t i = 0; i < got; ++i)
            ok = ok && wc[i].ok();
        n -= got;
    }
    return ok;
}

// Takes `n` completions with the non-blocking poll<N>() loop.
template <class Completion>
bool take_polled(rx::completion_queue<Completion>& cq, std::size_t n) {
    bool ok = true;
    while (n > 0) {
        for (rx::work_completion const& wc : cq.template poll<16>()) {
            ok = ok && wc.ok();
            --n;
        }
    }
    return ok;
}

constexpr std::size_t rounds = 32;

} // namespace

TEST_CASE_TEMPLATE("posting and polling every work-request kind allocates nothing", Completion, rx::busy_poll,
                   rx::event_driven) {
    rx::qp_settings opt;
    opt.remote_access = rx::all_remote;
    opt.initiator_depth = 4;
    opt.responder_resources = 4;
    test::loopback<rx::rc, Completion> lb{rx::qp_capabilities{.max_inline_data = 64}, opt};
    test::buffer local(lb.pd, 4096), remote(lb.pd, 4096);
    auto const msg = local.span().first(64);
    auto const result = local.mr.template span<std::uint64_t>(64, 1);
    auto const target = remote.mr.remote().first(64);
    auto const word = remote.mr.template remote<std::uint64_t>().subspan(64, 1);
    auto const rbuf = remote.span().subspan(1024, 64);
    auto const abuf = local.span().subspan(1024, 64);

    // One warm-up round of everything outside the count (first-use work in the provider).
    lb.b.post_recv(rx::recv{rbuf});
    lb.a.post(rx::send{msg});
    REQUIRE(take(lb.cq_a, 1));
    REQUIRE(take(lb.cq_b, 1));

    allocation_counter counter;
    bool ok = true;
    for (std::size_t r = 0; r < rounds; ++r) {
        // two-sided: recv at b, then send, send_imm, inline send, write_imm consuming them
        lb.b.post_recv(rx::recv{rbuf}.id(1), rx::recv{rbuf}.id(2), rx::recv{rbuf}.id(3), rx::recv{rbuf}.id(4));
        lb.a.post(rx::send{msg}.id(10));
        lb.a.post(rx::send_imm{msg, 7}.id(11), rx::send{msg}.inlined().id(12));
        lb.a.post(rx::write_imm{msg, target, 9}.id(13));
        ok = ok && take(lb.cq_a, 3); // 10, 11+12 (one chain: the last is signaled too), 13
        ok = ok && take(lb.cq_a, 1);
        ok = ok && take(lb.cq_b, 4);
        // one-sided: write, read, atomics; alone and chained; selective signaling
        lb.a.post(rx::write{msg, target}.id(20));
        lb.a.post(rx::write{msg, target}.unsignaled(), rx::write{msg, target}.unsignaled(),
                  rx::write{msg, target}.unsignaled(), rx::write{msg, target}.id(21));
        lb.a.post(rx::read{msg, target}.id(22));
        lb.a.post(rx::compare_swap{result, word, 0, 1}.id(23), rx::fetch_add{result, word, 1}.id(24));
        ok = ok && take_polled(lb.cq_a, 5);
        // receives posted on a, consumed by b's sends
        lb.a.post_recv(rx::recv{abuf}.id(30));
        lb.b.post(rx::send{rbuf.first(8)}.id(31));
        ok = ok && take(lb.cq_b, 1);
        ok = ok && take(lb.cq_a, 1);
        // non-throwing forms and empty polls
        auto const pr = lb.a.try_post(rx::write{msg, target}.id(40));
        ok = ok && static_cast<bool>(pr);
        ok = ok && take(lb.cq_a, 1);
        std::array<rx::work_completion, 4> none;
        std::error_code ec;
        ok = ok && lb.cq_a.poll(std::span{none}, ec) == 0 && !ec;
        ok = ok && lb.cq_a.template poll<4>().empty();
    }
    CHECK(ok);
    CHECK(counter.count() == 0);
}

#if defined(RDMACXX_TEST_ASIO)
// The Asio adapter (built when Meson finds standalone Asio): a co_await loop of sends and
// receives allocates nothing per operation once warm, Asio's own allocations (aligned_alloc)
// counted too. The dispatcher keeps each operation's handler in its slot pool and allocates
// what it posts (completions, sweeps) from its post pool; Asio recycles its coroutine frames
// per thread.
#include "rdmacxx/asio.hpp"

#include <optional>

TEST_CASE("asio: a co_await loop of sends and receives allocates nothing per operation after warm-up") {
    namespace rxa = rdmacxx::io;
    rx::context ctx = test::open_test_device();
    rx::end_port const port{ctx};
    rx::protection_domain pd{ctx};
    rx::completion_channel channel{ctx};
    rx::completion_queue<rx::event_driven> cq_a{ctx, 256, channel}, cq_b{ctx, 256, channel};
    rx::queue_pair<rx::rc, rx::event_driven> a{pd, cq_a, cq_a, {}}, b{pd, cq_b, cq_b, {}};
    a.connect(port, b.local_endpoint(port));
    b.connect(port, a.local_endpoint(port));
    ::asio::io_context io{1};
    rxa::completion_dispatcher d{io.get_executor(), channel, {.max_operations = 64}};
    d.add(cq_a);
    d.add(cq_b);
    test::buffer buf(pd, 4096);

    constexpr std::size_t warm_up = 64, measured = 256, receivers = 4;
    std::size_t sent = 0, received = 0;
    long allocated = -1;
    std::optional<allocation_counter> counter;
    bool ok = true;
    // Four receivers keep a receive posted ahead of every message; the sender awaits each send.
    auto receiver = [&](std::size_t k) -> ::asio::awaitable<void> {
        for (;;) {
            rx::work_completion const wc =
                co_await rxa::async_recv(d, b, rx::recv{buf.span().subspan(k * 64, 64)}, ::asio::use_awaitable);
            ok = ok && wc.ok() && wc.byte_len() == 32;
            ++received;
        }
    };
    auto sender = [&]() -> ::asio::awaitable<void> {
        for (std::size_t i = 0; i < warm_up + measured; ++i) {
            if (i == warm_up) counter.emplace();
            rx::work_completion const wc =
                co_await rxa::async_post(d, a, rx::send{buf.span().subspan(2048, 32)}, ::asio::use_awaitable);
            ok = ok && wc.ok();
            ++sent;
        }
        allocated = counter->count();
        counter.reset();
        io.stop();
    };
    for (std::size_t k = 0; k < receivers; ++k)
        ::asio::co_spawn(io, receiver(k), [](std::exception_ptr) {});
    ::asio::co_spawn(io, sender(), [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
    });
    io.run_for(std::chrono::seconds{60});
    CHECK(ok);
    REQUIRE(sent == warm_up + measured);
    CHECK(received >= sent - receivers);
    MESSAGE("allocations over " << measured << " sends and their receives (" << 2 * measured
                                << " operations): " << allocated);
    CHECK(allocated == 0);
}

// Hooking an operation's cancellation slot allocates (in the slot's signal); when that throws,
// the operation takes no slot of the dispatcher's pool, posts nothing and leaves the
// cancellation slot empty: the exception reaches the caller and the pool is as it was.
TEST_CASE("asio: an allocation failure hooking the cancellation slot takes no slot and posts nothing") {
    namespace rxa = rdmacxx::io;
    rx::context ctx = test::open_test_device();
    rx::end_port const port{ctx};
    rx::protection_domain pd{ctx};
    test::buffer buf(pd, 4096);
    rx::completion_channel channel{ctx};
    rx::completion_queue<rx::event_driven> cq_a{ctx, 256, channel}, cq_b{ctx, 256, channel};
    rx::queue_pair<rx::rc, rx::event_driven> a{pd, cq_a, cq_a, {}}, b{pd, cq_b, cq_b, {}};
    a.connect(port, b.local_endpoint(port));
    b.connect(port, a.local_endpoint(port));
    ::asio::io_context io{1};
    rxa::completion_dispatcher d{io.get_executor(), channel, {.max_operations = 1}};
    d.add(cq_a);
    d.add(cq_b);
    ::asio::cancellation_signal signal;
    int calls = 0;
    auto handler =
        ::asio::bind_cancellation_slot(signal.slot(), [&calls](std::error_code, rx::work_completion) { ++calls; });
    fail_next = true;
    CHECK_THROWS_AS(rxa::async_recv(d, b, rx::recv{buf.span().first(64)}, handler), std::bad_alloc);
    fail_next = false;
    CHECK(d.in_flight() == 0);
    CHECK_FALSE(signal.slot().has_handler());
    // The pool's one slot is free (before, the failed attempt kept it: ENOBUFS here), and nothing
    // was posted: the message lands in this receive.
    std::error_code recv_ec{1, std::generic_category()};
    std::uint32_t len = 0;
    rxa::async_recv(d, b, rx::recv{buf.span().first(64)}, [&](std::error_code ec, rx::work_completion wc) {
        recv_ec = ec;
        len = wc.byte_len();
        ++calls;
    });
    CHECK(d.in_flight() == 1);
    a.post(rx::send{buf.span().subspan(1024, 40)}); // not through the dispatcher: its completion is a stray
    io.run_for(std::chrono::seconds{10});
    CHECK(calls == 1);
    CHECK_FALSE(recv_ec);
    CHECK(len == 40);
    CHECK(d.in_flight() == 0);
}
#endif
