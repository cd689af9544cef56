// Memory windows on a real device: type 1 bound with ibv_bind_mw, type 2 with the bind_mw work
// request; a peer writes and reads through the window; after the window is revoked (type 1
// unbound, type 2 invalidated locally or by the peer's SEND with invalidate) the same access
// fails with a remote access error; bad binds are refused before anything is posted.
#include "fixture.hpp"

#include "rdmacxx/memory_window.hpp"

#include "rdmacxx/detail/quirks.hpp"

#include <chrono>
#include <cstring>
#include <set>
#include <string>

namespace rx = rdmacxx;
using namespace std::chrono_literals;

namespace {

// What a window's region is registered with: no remote right of its own, only the window's.
constexpr rx::access window_region = rx::access::local_write | rx::access::mw_bind;
constexpr rx::access read_write = rx::access::remote_read | rx::access::remote_write;

template <class Completion>
rx::work_completion next(rx::completion_queue<Completion>& cq) {
    auto const wc = cq.wait_one(10s);
    REQUIRE_MESSAGE(wc.has_value(), "no completion within 10 s");
    return *wc;
}

template <class Completion>
rx::work_completion ok(rx::completion_queue<Completion>& cq, ibv_wc_opcode opcode) {
    auto const wc = next(cq);
    INFO("status: " << ::ibv_wc_status_str(wc.status()));
    REQUIRE(wc.ok());
    CHECK(wc.opcode() == opcode);
    return wc;
}

// The peer (b) writes a pattern through `window` and reads it back; the bytes land in `region`
// at `offset`.
template <class Loopback>
void write_and_read_through(Loopback& lb, rx::remote_span<std::byte> window, test::buffer& region, std::size_t offset) {
    test::buffer peer(lb.pd, window.size_bytes()), back(lb.pd, window.size_bytes());
    test::fill_pattern(peer.bytes_, 5);
    lb.b.post(rx::write{peer.span(), window}.id(1));
    ok(lb.cq_b, IBV_WC_RDMA_WRITE);
    CHECK(std::memcmp(region.bytes_.data() + offset, peer.bytes_.data(), peer.bytes_.size()) == 0);
    if (offset > 0) CHECK(region.bytes_[offset - 1] == std::byte{0});
    lb.b.post(rx::read{back.span(), window}.id(2));
    ok(lb.cq_b, IBV_WC_RDMA_READ);
    CHECK(back.bytes_ == peer.bytes_);
}

// The peer's same write through the revoked `window` fails with a remote access error.
template <class Loopback>
void write_is_refused(Loopback& lb, rx::remote_span<std::byte> window, test::buffer& region, std::size_t offset) {
    test::buffer peer(lb.pd, window.size_bytes(), std::byte{0x5a});
    std::byte const before = region.bytes_[offset];
    lb.b.post(rx::write{peer.span(), window}.id(3));
    auto const wc = next(lb.cq_b);
    CHECK(wc.status() == IBV_WC_REM_ACCESS_ERR);
    CHECK(wc.wr_id() == 3);
    CHECK(region.bytes_[offset] == before);
}

} // namespace

TEST_CASE("type 1 memory window: a peer writes and reads through it; unbound, the same write fails") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    test::buffer region(lb.pd, 8192, std::byte{0}, window_region);
    rx::memory_window<1> mw(lb.pd);
    rx::remote_span<std::byte> const window = mw.bind(lb.a, region.mr, 1024, 2048, read_write, 7);
    CHECK(ok(lb.cq_a, IBV_WC_BIND_MW).wr_id() == 7);
    CHECK(window.address() == reinterpret_cast<std::uintptr_t>(region.bytes_.data()) + 1024);
    CHECK(window.size_bytes() == 2048);
    CHECK(window.rkey() == mw.rkey());
    CHECK(window.rkey() != region.mr.rkey());
    write_and_read_through(lb, window, region, 1024);

    mw.unbind(lb.a, 8);
    CHECK(ok(lb.cq_a, IBV_WC_BIND_MW).wr_id() == 8);
    CHECK(mw.remote().empty());
    write_is_refused(lb, window, region, 1024);
}

TEST_CASE_TEMPLATE("type 2 memory window: bound by a work request, a peer writes and reads; invalidated, the same "
                   "write fails",
                   Post, rx::legacy_post, rx::extended_post) {
    test::loopback<rx::rc, rx::busy_poll, Post> lb;
    test::buffer region(lb.pd, 8192, std::byte{0}, window_region);
    rx::memory_window<2> mw(lb.pd);
    std::uint32_t const allocated = mw.rkey();
    lb.a.post(rx::bind_mw{mw, region.mr, 4096, 1024, read_write}.id(11));
    CHECK(ok(lb.cq_a, IBV_WC_BIND_MW).wr_id() == 11);
    rx::remote_span<std::byte> const window = mw.remote();
    CHECK(window.address() == reinterpret_cast<std::uintptr_t>(region.bytes_.data()) + 4096);
    CHECK(window.size_bytes() == 1024);
    CHECK(window.rkey() == ::ibv_inc_rkey(allocated));
    write_and_read_through(lb, window, region, 4096);

    SUBCASE("local invalidate") {
        lb.a.post(rx::local_invalidate{mw}.id(12));
        CHECK(ok(lb.cq_a, IBV_WC_LOCAL_INV).wr_id() == 12);
        write_is_refused(lb, window, region, 4096);
    }
    SUBCASE("SEND with invalidate from the peer") {
        test::buffer note(lb.pd, 64), got(lb.pd, 64);
        lb.a.post_recv(rx::recv{got.span()}.id(13));
        lb.b.post(rx::send_inv{note.span(), window}.id(14));
        CHECK(ok(lb.cq_b, IBV_WC_SEND).wr_id() == 14);
        auto const wc = ok(lb.cq_a, IBV_WC_RECV);
        CHECK(wc.wr_id() == 13);
        // The receive completion names the invalidated rkey. Its flag: IBV_WC_WITH_INV (0x8) by
        // the verbs ABI; rxe sets another bit (a provider quirk: detail/quirks.hpp).
        MESSAGE("SEND with invalidate: receive wc_flags " << static_cast<unsigned>(wc.native().wc_flags));
        std::uint32_t const vendor = lb.pd.context().query_device().orig_attr.vendor_id;
        CHECK((wc.native().wc_flags & rx::detail::quirks::with_inv_flags(vendor)) != 0);
        CHECK(wc.native().invalidated_rkey == window.rkey());
        write_is_refused(lb, window, region, 4096);
    }
}

TEST_CASE("a type 2 memory window invalidated is bound again with a new rkey, and the old one stays revoked") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    test::buffer region(lb.pd, 4096, std::byte{0}, window_region);
    rx::memory_window<2> mw(lb.pd);
    lb.a.post(rx::bind_mw{mw, region.mr, 0, 512, read_write});
    ok(lb.cq_a, IBV_WC_BIND_MW);
    auto const first = mw.remote();
    lb.a.post(rx::local_invalidate{mw});
    ok(lb.cq_a, IBV_WC_LOCAL_INV);
    lb.a.post(rx::bind_mw{mw, region.mr, 1024, 512, read_write});
    ok(lb.cq_a, IBV_WC_BIND_MW);
    auto const second = mw.remote();
    CHECK(second.rkey() != first.rkey());
    write_and_read_through(lb, second, region, 1024);
    write_is_refused(lb, first, region, 0);
}

TEST_CASE("binding a memory window beyond its region, or to a region without mw_bind, is refused before posting") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    test::buffer region(lb.pd, 4096, std::byte{0}, window_region);
    test::buffer plain(lb.pd, 4096, std::byte{0}, rx::access::local_write);
    rx::memory_window<1> mw1(lb.pd);
    rx::memory_window<2> mw2(lb.pd);
    auto const refused = [](auto&& post, char const* words) {
        try {
            post();
            FAIL("not refused");
        } catch (rx::argument_error const& e) {
            CHECK(std::string{e.what()}.find(words) != std::string::npos);
        }
    };
    refused([&] { (void)mw1.bind(lb.a, region.mr, 4000, 97, read_write); }, "beyond the region");
    refused([&] { (void)mw1.bind(lb.a, region.mr, 4097, 0, read_write); }, "beyond the region");
    refused([&] { (void)mw1.bind(lb.a, plain.mr, read_write); }, "without access::mw_bind");
    refused([&] { lb.a.post(rx::bind_mw{mw2, region.mr, 1, 4096, read_write}); }, "beyond the region");
    refused([&] { lb.a.post(rx::bind_mw{mw2, plain.mr, read_write}); }, "without access::mw_bind");
    refused([&] { lb.a.post(rx::bind_mw{mw2, region.mr, rx::access::local_write}); }, "grants only");
    // Nothing reached the device: the send CQ stays empty, and a good bind still works.
    CHECK_FALSE(lb.cq_a.wait_one(100ms).has_value());
    lb.a.post(rx::bind_mw{mw2, region.mr, read_write}.id(21));
    CHECK(ok(lb.cq_a, IBV_WC_BIND_MW).wr_id() == 21);
    write_and_read_through(lb, mw2.remote(), region, 0);
}

TEST_CASE("a bind_mw request refused before posting, or never posted, leaves its window as it was") {
    test::loopback<rx::rc, rx::busy_poll> lb; // max_inline_data 0: any inline payload is refused
    test::buffer region(lb.pd, 4096, std::byte{0}, window_region), note(lb.pd, 64);
    rx::memory_window<2> mw(lb.pd);
    std::uint32_t const allocated = mw.rkey();
    try {
        lb.a.post(rx::bind_mw{mw, region.mr, 0, 512, read_write}, rx::send{note.span()}.inlined());
        FAIL("an inline send over max_inline_data was not refused");
    } catch (rx::argument_error const& e) {
        CHECK(std::string{e.what()}.find("max_inline_data") != std::string::npos);
    }
    { rx::bind_mw const unposted{mw, region.mr, 0, 512, read_write}; } // built, never posted
    CHECK(mw.rkey() == allocated);
    CHECK(mw.remote().empty());
    CHECK_THROWS_AS(rx::bind_mw(mw, region.mr, 0, 0, read_write), rx::argument_error); // no bytes
    rx::memory_window<2> moved = std::move(mw);
    CHECK(mw.native_handle() == nullptr);
    CHECK(mw.rkey() == 0);
    CHECK_THROWS_AS(rx::bind_mw(mw, region.mr, read_write), rx::argument_error); // moved-from window
    CHECK_FALSE(lb.cq_a.wait_one(100ms).has_value());                            // nothing was posted

    // The next bind names the window's true current rkey: the device takes it, and a peer
    // reaches the window with the key the request announced.
    rx::bind_mw bind{moved, region.mr, 0, 512, read_write};
    lb.a.post(bind.id(31));
    CHECK(ok(lb.cq_a, IBV_WC_BIND_MW).wr_id() == 31);
    CHECK(moved.rkey() == ::ibv_inc_rkey(allocated));
    CHECK(moved.remote().rkey() == bind.rkey());
    write_and_read_through(lb, moved.remote(), region, 0);
}

TEST_CASE("a memory window takes 256 binds, each with an rkey of its own; the next is refused, and the first "
          "bind's rkey stays revoked") {
    test::loopback<rx::rc, rx::busy_poll> lb;
    test::buffer region(lb.pd, 4096, std::byte{0}, window_region);
    constexpr std::uint32_t max_binds = rx::memory_window<2>::max_binds;
    auto const refused_again = [](auto&& bind) {
        try {
            bind();
            FAIL("a bind past max_binds was not refused");
        } catch (rx::argument_error const& e) {
            CHECK(std::string{e.what()}.find("rkey would repeat") != std::string::npos);
        }
    };

    rx::memory_window<2> mw(lb.pd);
    std::set<std::uint32_t> rkeys;
    rx::remote_span<std::byte> first;
    for (std::uint32_t i = 0; i < max_binds; ++i) {
        REQUIRE(mw.binds_left() == max_binds - i);
        lb.a.post(rx::bind_mw{mw, region.mr, 0, 512, read_write});
        ok(lb.cq_a, IBV_WC_BIND_MW);
        if (i == 0) first = mw.remote();
        rkeys.insert(mw.rkey());
        lb.a.post(rx::local_invalidate{mw});
        ok(lb.cq_a, IBV_WC_LOCAL_INV);
    }
    CHECK(rkeys.size() == max_binds);
    CHECK(mw.binds_left() == 0);
    std::uint32_t const last = mw.rkey();
    refused_again([&] { lb.a.post(rx::bind_mw{mw, region.mr, 0, 512, read_write}); });
    CHECK(mw.rkey() == last);
    CHECK_FALSE(lb.cq_a.wait_one(100ms).has_value()); // nothing was posted

    // Type 1 counts its binds the same way.
    rx::memory_window<1> mw1(lb.pd);
    for (std::uint32_t i = 0; i < max_binds; ++i) {
        (void)mw1.bind(lb.a, region.mr, 0, 256, read_write);
        ok(lb.cq_a, IBV_WC_BIND_MW);
    }
    refused_again([&] { (void)mw1.bind(lb.a, region.mr, 0, 256, read_write); });
    mw1.unbind(lb.a); // revoking is never refused
    ok(lb.cq_a, IBV_WC_BIND_MW);
    CHECK(mw1.binds_left() == 0);

    // A new window serves; the first window's first rkey, never handed out again, still fails.
    rx::memory_window<2> fresh(lb.pd);
    lb.a.post(rx::bind_mw{fresh, region.mr, 1024, 512, read_write});
    ok(lb.cq_a, IBV_WC_BIND_MW);
    write_and_read_through(lb, fresh.remote(), region, 1024);
    write_is_refused(lb, first, region, 0);
}
