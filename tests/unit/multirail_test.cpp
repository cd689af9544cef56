// The multi-rail connection's wire formats and message windows, without a device: encodings
// round-trip and are big-endian; every decode refuses what is wrong; the sender's window frees a
// message only once it is acknowledged and off the rails; the receiver's window puts arrivals
// back in order and drops duplicates.
#include "rdmacxx/multirail/rail.hpp"
#include "rdmacxx/multirail/window.hpp"
#include "rdmacxx/multirail/wire.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rx = rdmacxx;
namespace mr = rdmacxx::multirail;

namespace {
rx::endpoint some_endpoint(std::uint32_t qpn) {
    rx::endpoint e;
    e.qpn = qpn;
    e.psn = 0x123456;
    e.path_mtu = IBV_MTU_1024;
    return e;
}
} // namespace

TEST_CASE("multirail wire: a rail address round-trips, big-endian, and bad ones are refused") {
    mr::rail_address a{0x0102030405060708ULL, 64, 4096, 3, {some_endpoint(0x11), some_endpoint(0x22)}};
    auto const bytes = a.to_bytes();
    REQUIRE(bytes.size() == mr::rail_address::wire_size(2));
    CHECK(bytes[5] == std::byte{2});
    CHECK(bytes[8] == std::byte{1});
    CHECK(bytes[15] == std::byte{8});
    auto const b = mr::rail_address::from_bytes(bytes);
    CHECK(b.nonce == a.nonce);
    CHECK(b.window == 64);
    CHECK(b.message_bytes == 4096);
    CHECK(b.epoch == 3);
    REQUIRE(b.rails.size() == 2);
    CHECK(b.rails[1].qpn == 0x22);

    auto bad = bytes;
    bad[0] = std::byte{'X'};
    CHECK_THROWS_AS((void)mr::rail_address::from_bytes(bad), rx::argument_error);
    bad = bytes;
    bad[5] = std::byte{3}; // three rails claimed, two encoded
    CHECK_THROWS_AS((void)mr::rail_address::from_bytes(bad), rx::argument_error);
    bad = bytes;
    bad[6] = std::byte{1}; // reserved
    CHECK_THROWS_AS((void)mr::rail_address::from_bytes(bad), rx::argument_error);
    CHECK_THROWS_AS((void)mr::rail_address::from_bytes(std::span{bytes}.first(20)), rx::argument_error);
    bad = bytes;
    bad[28] = std::byte{1}; // reserved
    CHECK_THROWS_AS((void)mr::rail_address::from_bytes(bad), rx::argument_error);
    mr::rail_address const none{1, 1, 1, 0, {}}; // no rail
    CHECK_THROWS_AS((void)none.to_bytes(), rx::argument_error);
}

TEST_CASE("multirail wire: a remote region round-trips and refuses a wrong length") {
    mr::remote_region r{0x1000, 1 << 20, {0xaabbccdd, 0x11223344}};
    auto const bytes = r.to_bytes();
    REQUIRE(bytes.size() == mr::remote_region::wire_size(2));
    CHECK(bytes[24] == std::byte{0xaa});
    auto const s = mr::remote_region::from_bytes(bytes);
    CHECK(s.address == 0x1000);
    CHECK(s.length == 1 << 20);
    CHECK(s.rkeys == r.rkeys);
    std::vector<std::byte> longer = bytes;
    longer.push_back(std::byte{0});
    CHECK_THROWS_AS((void)mr::remote_region::from_bytes(longer), rx::argument_error);
}

TEST_CASE("multirail wire: a message header round-trips; a corrupt one is refused") {
    std::array<std::byte, 64> m{};
    mr::message_header{mr::message_kind::data, 0, 7, 5, 16, 0xdeadbeef}.write(m.data());
    auto const h = mr::message_header::read(m);
    CHECK(h.kind == mr::message_kind::data);
    CHECK(h.seq == 7);
    CHECK(h.ack == 5);
    CHECK(h.length == 16);
    CHECK(h.imm == 0xdeadbeef);
    CHECK(m[15] == std::byte{7});
    // A payload longer than what arrived.
    CHECK_THROWS_AS((void)mr::message_header::read(std::span{m}.first(40)), rx::argument_error);
    // An unknown kind; an acknowledgement with a number; a numbered message with number 0.
    auto bad = m;
    bad[5] = std::byte{9};
    CHECK_THROWS_AS((void)mr::message_header::read(bad), rx::argument_error);
    mr::message_header{mr::message_kind::ack, 0, 3, 5, 0, 0}.write(bad.data());
    CHECK_THROWS_AS((void)mr::message_header::read(bad), rx::argument_error);
    mr::message_header{mr::message_kind::data, 0, 0, 5, 0, 0}.write(bad.data());
    CHECK_THROWS_AS((void)mr::message_header::read(bad), rx::argument_error);
}

TEST_CASE("multirail window: the sender frees a message once acknowledged and off the rails, and posts a "
          "failed one again") {
    mr::detail::send_window w{4};
    std::vector<std::uint32_t> slots;
    for (int k = 0; k < 4; ++k) {
        REQUIRE(w.has_room());
        slots.push_back(w.push(mr::message_kind::data, 8, 0, 0, -1));
    }
    CHECK_FALSE(w.has_room());
    CHECK(w.waiting().size() == 4);
    for (auto i : slots)
        w.posted(i, 0, 0);
    w.completed(slots[0]);
    w.failed(slots[1]); // its rail went down: waiting again
    CHECK(w.waiting().size() == 1);
    CHECK(*w.waiting().begin() == 2);
    CHECK(w.acknowledge(2)); // 1 and 2 acknowledged: 1 freed; 2 was waiting, freed too (not sent again)
    CHECK(w.waiting().empty());
    CHECK(w.has_room());
    CHECK(w.in_flight() == 2);
    CHECK_FALSE(w.acknowledge(9)); // beyond what was numbered
    CHECK(w.posted_on(slots[2], 0, 0));
    CHECK_FALSE(w.posted_on(slots[2], 0, 1)); // a completion of another QP's posting names nothing
    CHECK_FALSE(w.posted_on(slots[2], 1, 0));
    // Acknowledged while still posted on a rail: its slot stays the device's until that completes.
    CHECK(w.acknowledge(4));
    CHECK(w.in_flight() == 0);
    (void)w.push(mr::message_kind::data, 8, 0, 0, -1); // message 5, slot of 1
    (void)w.push(mr::message_kind::data, 8, 0, 0, -1); // message 6, slot of 2
    CHECK_FALSE(w.has_room());                         // message 7's slot is message 3's, still posted
    w.completed(slots[2]);
    CHECK(w.has_room());
}

TEST_CASE("multirail window: the receiver puts arrivals in order and drops duplicates") {
    mr::detail::receive_window r{4, 16};
    std::array<std::byte, 4> p{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
    auto header = [](std::uint64_t seq) { return mr::message_header{mr::message_kind::data, 0, seq, 0, 4, 0}; };
    using arrival = mr::detail::receive_window::arrival;
    CHECK(r.take(header(2), p) == arrival::accepted);
    CHECK_FALSE(r.next().has_value()); // 1 has not arrived
    CHECK(r.take(header(2), p) == arrival::duplicate);
    CHECK(r.take(header(1), p) == arrival::accepted);
    REQUIRE(r.next().has_value());
    CHECK(r.next()->seq == 1);
    r.advance();
    CHECK(r.next()->seq == 2);
    r.advance();
    CHECK(r.payload(2)[3] == std::byte{4});
    CHECK(r.take(header(1), p) == arrival::duplicate); // handed over, not released
    CHECK(r.take(header(9), p) == arrival::out_of_window);
    r.release(2);
    CHECK(r.released() == 0); // 1 is not released yet
    r.release(1);
    CHECK(r.released() == 2);
    CHECK(r.take(header(1), p) == arrival::duplicate);
    CHECK(r.take(header(6), p) == arrival::accepted);
}

TEST_CASE("multirail: a list of rails parses, with or without ports; a bad one is refused") {
    auto const r = mr::parse_rails("mlx5_0,,mlx5_1/2");
    REQUIRE(r.size() == 2);
    CHECK(r[0].device == "mlx5_0");
    CHECK(r[0].port == 1);
    CHECK(r[1].device == "mlx5_1");
    CHECK(r[1].port == 2);
    CHECK_THROWS_AS((void)mr::parse_rails(""), rx::argument_error);
    CHECK_THROWS_AS((void)mr::parse_rails("a/0"), rx::argument_error);
    CHECK_THROWS_AS((void)mr::parse_rails("a/256"), rx::argument_error);
    CHECK_THROWS_AS((void)mr::parse_rails("a/x"), rx::argument_error);
    CHECK_THROWS_AS((void)mr::parse_rails("a,b,c,d,e,f,g,h,i"), rx::argument_error);
}
