// The Asio adapter's completion signature on a real device: one failure (a WRITE with a bad
// rkey, a receive on a QP in ERR, a refused post) reaches every kind of token with the same
// code — a callback, use_future, deferred, as_tuple and redirect_error under use_awaitable, no
// token at all — and the library's exception reaches co_await and io::as_exception. Each
// initiation names the dispatcher's executor.
#include "asio_fixture.hpp"
#include "asio_net.hpp"

#include <chrono>
#include <exception>
#include <future>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <vector>

namespace rx = rdmacxx;
namespace rxa = rdmacxx::io;
using namespace std::chrono_literals;
using test::asio_pair;
using test::run_bounded;

namespace {

// A completion token that records the executor its operation's initiation names, then starts
// the operation with a callback.
struct probe_token {
    ::asio::any_io_executor* seen;
    std::error_code* code;
};

} // namespace

template <class Signature>
struct asio::async_result<probe_token, Signature> {
    template <class Initiation, class... Args>
    static void initiate(Initiation&& initiation, probe_token t, Args&&... args) {
        *t.seen = initiation.get_executor();
        std::forward<Initiation>(initiation)([c = t.code](std::error_code ec, auto&&) { *c = ec; },
                                             std::forward<Args>(args)...);
    }
};

namespace {

// Connected QPs and a WRITE whose rkey is wrong: it fails with IBV_WC_REM_ACCESS_ERR and moves
// the QP to ERR, so each token gets a pair of its own.
struct bad_write {
    asio_pair<> p;
    test::buffer local{p.pd, 256}, remote{p.pd, 256};
    template <class... Token>
    auto write(Token&&... token) {
        rx::remote_span<std::byte> const bad{remote.mr.remote().address(), 64, remote.mr.rkey() ^ 0x5a5a00U};
        return rxa::async_post(p.d, p.a, rx::write{local.span().first(64), bad}, std::forward<Token>(token)...);
    }
};

TEST_CASE("asio: a bad rkey reaches every token with one code, and co_await and as_exception with wc_error") {
    bad_write p, q, r;
    auto const expected = rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR);
    std::vector<std::error_code> codes;
    std::exception_ptr failure;

    SUBCASE("callback") {
        p.write([&](std::error_code ec, rx::work_completion wc) {
            codes.push_back(ec);
            CHECK(wc.status() == IBV_WC_REM_ACCESS_ERR);
        });
        run_bounded(p.p.io);
    }
    SUBCASE("use_future: get() throws std::system_error with the code") {
        auto f = p.write(::asio::use_future);
        run_bounded(p.p.io);
        REQUIRE(f.wait_for(10s) == std::future_status::ready); // set on the promise executor
        try {
            (void)f.get();
        } catch (test::net_system_error const& e) {
            codes.push_back(e.code());
        }
    }
    SUBCASE("deferred, and no token at all (the default token), launched later with a callback") {
        auto op = p.write(::asio::experimental::deferred);
        CHECK(p.p.d.in_flight() == 0); // nothing started yet
        std::move(op)([&](std::error_code ec, rx::work_completion) { codes.push_back(ec); });
        run_bounded(p.p.io);
        auto plain = q.write(); // no token
        CHECK(q.p.d.in_flight() == 0);
        std::move(plain)([&](std::error_code ec, rx::work_completion) { codes.push_back(ec); });
        run_bounded(q.p.io);
    }
    SUBCASE("as_tuple and redirect_error under use_awaitable see the code; co_await throws wc_error") {
        ::asio::co_spawn(
            p.p.io,
            [&]() -> ::asio::awaitable<void> {
                auto [ec, wc] = co_await p.write(::asio::experimental::as_tuple(::asio::use_awaitable));
                codes.push_back(ec);
                CHECK(wc.status() == IBV_WC_REM_ACCESS_ERR);
            },
            [&](std::exception_ptr e) {
                if (e) failure = e;
            });
        run_bounded(p.p.io);
        ::asio::co_spawn(
            q.p.io,
            [&]() -> ::asio::awaitable<void> {
                rxa::error_code ec; // Asio's own: std::error_code, or boost::system::error_code
                (void)co_await q.write(::asio::redirect_error(::asio::use_awaitable, ec));
                codes.push_back(ec);
            },
            [&](std::exception_ptr e) {
                if (e) failure = e;
            });
        run_bounded(q.p.io);
        bool thrown = false;
        ::asio::co_spawn(
            r.p.io,
            [&]() -> ::asio::awaitable<void> {
                try {
                    (void)co_await r.write(::asio::use_awaitable);
                } catch (rx::wc_error const& e) {
                    thrown = true;
                    codes.push_back(e.code());
                    CHECK(e.status() == IBV_WC_REM_ACCESS_ERR);
                }
            },
            [&](std::exception_ptr e) {
                if (e) failure = e;
            });
        run_bounded(r.p.io);
        CHECK(thrown);
    }
    SUBCASE("as_exception: a callback and use_future get wc_error") {
        p.write(rxa::as_exception([&](std::exception_ptr e, rx::work_completion wc) {
            CHECK(wc.status() == IBV_WC_REM_ACCESS_ERR);
            try {
                std::rethrow_exception(e);
            } catch (rx::wc_error const& x) {
                codes.push_back(x.code());
            }
        }));
        run_bounded(p.p.io);
        auto f = q.write(rxa::as_exception(::asio::use_future));
        run_bounded(q.p.io);
        REQUIRE(f.wait_for(10s) == std::future_status::ready); // set on the promise executor
        try {
            (void)f.get();
        } catch (rx::wc_error const& x) {
            codes.push_back(x.code());
        }
    }
    if (failure) std::rethrow_exception(failure);
    REQUIRE_FALSE(codes.empty());
    for (auto const& ec : codes)
        CHECK(ec == expected);
}

TEST_CASE("asio: a refused post is EINVAL for every token and argument_error for co_await and as_exception") {
    asio_pair<> p;
    test::buffer local(p.pd, 4096);
    auto const too_long = local.span().first(p.a.capabilities().max_inline_data + 1);
    auto const send = [&](auto&& token) {
        return rxa::async_post(p.d, p.a, rx::send{too_long}.inlined(), std::forward<decltype(token)>(token));
    };
    std::vector<std::error_code> codes;
    send([&](std::error_code ec, rx::work_completion) { codes.push_back(ec); });
    auto f = send(::asio::use_future);
    int typed = 0;
    send(rxa::as_exception([&](std::exception_ptr e, rx::work_completion) {
        try {
            std::rethrow_exception(e);
        } catch (rx::argument_error const& x) {
            ++typed;
            codes.push_back(x.code());
        }
    }));
    std::exception_ptr failure;
    ::asio::co_spawn(
        p.io,
        [&]() -> ::asio::awaitable<void> {
            auto [ec, wc] = co_await send(::asio::experimental::as_tuple(::asio::use_awaitable));
            codes.push_back(ec);
            try {
                (void)co_await send(::asio::use_awaitable);
            } catch (rx::argument_error const& x) {
                ++typed;
                codes.push_back(x.code());
            }
        },
        [&](std::exception_ptr e) {
            if (e) failure = e;
        });
    run_bounded(p.io);
    if (failure) std::rethrow_exception(failure);
    try {
        (void)f.get();
    } catch (test::net_system_error const& e) {
        codes.push_back(e.code());
    }
    CHECK(typed == 2);
    REQUIRE(codes.size() == 5);
    for (auto const& ec : codes)
        CHECK(ec == std::errc::invalid_argument);
    CHECK(p.d.in_flight() == 0);
}

TEST_CASE("asio: every initiation names the executor of its dispatcher or engine") {
    asio_pair<> p;
    test::buffer buf(p.pd, 256);
    ::asio::any_io_executor seen;
    std::error_code code;
    auto const expected = ::asio::any_io_executor{p.io.get_executor()};
    rxa::async_post(p.d, p.a, rx::send{buf.span().first(16)}, probe_token{&seen, &code});
    CHECK(seen == expected);
    seen = {};
    rxa::async_recv(p.d, p.b, rx::recv{buf.span().subspan(64, 16)}, probe_token{&seen, &code});
    CHECK(seen == expected);
    run_bounded(p.io);
    CHECK_FALSE(code);
    seen = {};
    rxa::cm_engine eng{p.io.get_executor()};
    rxa::async_connect<rx::rc, rx::busy_poll>(eng, test::device_address(7471), {}, {}, probe_token{&seen, &code});
    CHECK(seen == expected);
    seen = {};
    rxa::cm_acceptor<rx::rc> acceptor{eng, test::device_address(0)};
    rxa::async_accept<rx::busy_poll>(acceptor, {}, {}, {}, probe_token{&seen, &code});
    CHECK(seen == expected);
}

} // namespace
