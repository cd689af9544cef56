#include "rdmacxx/endpoint.hpp"

#include "rdmacxx/memory.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rx = rdmacxx;

namespace {
template <std::size_t N>
std::array<std::byte, N> bytes_of(std::array<int, N> const& v) {
    std::array<std::byte, N> out{};
    for (std::size_t i = 0; i < N; ++i)
        out[i] = static_cast<std::byte>(v[i]);
    return out;
}

rx::endpoint sample_endpoint() {
    rx::endpoint e;
    e.lid = 0x1234;
    e.qpn = 0x00abcdef;
    e.psn = 0x00123456;
    e.gid = rx::gid::parse("fe80::1:2");
    e.path_mtu = IBV_MTU_1024;
    return e;
}
} // namespace

static_assert(rx::endpoint::wire_size == 32);
static_assert(rx::remote_span<std::uint64_t>::wire_size == 32);
static_assert(std::is_same_v<decltype(rx::endpoint{}.to_bytes()), std::array<std::byte, rx::endpoint::wire_size>>);

TEST_CASE("wire: an endpoint's exact bytes, big-endian") {
    auto const got = sample_endpoint().to_bytes();
    auto const want = bytes_of<32>({'R',  'X',  'E', 'P', 1, 3, 0x12, 0x34, 0, 0xab, 0xcd, 0xef, 0, 0x12, 0x34, 0x56,
                                    0xfe, 0x80, 0,   0,   0, 0, 0,    0,    0, 0,    0,    0,    0, 1,    0,    2});
    CHECK(got == want);
}

TEST_CASE("wire: an endpoint round-trips, also from a longer (padded) buffer") {
    rx::endpoint const e = sample_endpoint();
    auto const b = e.to_bytes();
    CHECK(rx::endpoint::from_bytes(b) == e);
    std::vector<std::byte> padded(b.begin(), b.end());
    padded.resize(56); // CM private data arrives zero padded
    CHECK(rx::endpoint::from_bytes(padded) == e);
    rx::endpoint unset; // path MTU not said
    CHECK(rx::endpoint::from_bytes(unset.to_bytes()) == unset);
}

TEST_CASE("wire: a short, corrupt or other-version endpoint is refused, naming what is wrong") {
    auto const good = sample_endpoint().to_bytes();
    CHECK_THROWS_WITH_AS((void)rx::endpoint::from_bytes(std::span{good}.first(31)),
                         doctest::Contains("31 bytes are too short"), rx::argument_error);
    CHECK_THROWS_WITH_AS((void)rx::endpoint::from_bytes({}), doctest::Contains("too short"), rx::argument_error);
    auto bad = good;
    bad[0] = std::byte{'X'};
    CHECK_THROWS_WITH_AS((void)rx::endpoint::from_bytes(bad), doctest::Contains("magic"), rx::argument_error);
    bad = good;
    bad[4] = std::byte{2};
    CHECK_THROWS_WITH_AS((void)rx::endpoint::from_bytes(bad), doctest::Contains("version 2"), rx::argument_error);
    bad = good;
    bad[5] = std::byte{6};
    CHECK_THROWS_WITH_AS((void)rx::endpoint::from_bytes(bad), doctest::Contains("path MTU code 6"), rx::argument_error);
    bad = good;
    bad[8] = std::byte{1};
    CHECK_THROWS_WITH_AS((void)rx::endpoint::from_bytes(bad), doctest::Contains("reserved bits of the QPN"),
                         rx::argument_error);
    bad = good;
    bad[12] = std::byte{0x80};
    CHECK_THROWS_WITH_AS((void)rx::endpoint::from_bytes(bad), doctest::Contains("reserved bits of the PSN"),
                         rx::argument_error);
    auto wide = sample_endpoint();
    wide.qpn = 0x01000000;
    CHECK_THROWS_AS((void)wide.to_bytes(), rx::argument_error);
}

TEST_CASE("wire: a remote_span's exact bytes, big-endian, and its round trip") {
    rx::remote_span<std::uint64_t> const s{0x0102030405060708, 0x10, 0xdeadbeef};
    auto const got = s.to_bytes();
    auto const want = bytes_of<32>({'R', 'X', 'R', 'S', 1, 0, 0, 0,    1,    2,    3,    4,    5, 6, 7, 8,
                                    0,   0,   0,   0,   0, 0, 0, 0x10, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 8});
    CHECK(got == want);
    CHECK(rx::remote_span<std::uint64_t>::from_bytes(got) == s);
    rx::remote_span<std::byte> const b{42, 4096, 7};
    CHECK(rx::remote_span<std::byte>::from_bytes(b.to_bytes()) == b);
}

TEST_CASE("wire: a short, corrupt, other-version or other-type remote_span is refused") {
    rx::remote_span<std::uint64_t> const s{0x1000, 4, 99};
    auto const good = s.to_bytes();
    using span64 = rx::remote_span<std::uint64_t>;
    CHECK_THROWS_WITH_AS((void)span64::from_bytes(std::span{good}.first(16)), doctest::Contains("too short"),
                         rx::argument_error);
    auto bad = good;
    bad[3] = std::byte{'P'};
    CHECK_THROWS_WITH_AS((void)span64::from_bytes(bad), doctest::Contains("magic"), rx::argument_error);
    // an endpoint is not a remote span
    CHECK_THROWS_WITH_AS((void)span64::from_bytes(sample_endpoint().to_bytes()), doctest::Contains("magic"),
                         rx::argument_error);
    bad = good;
    bad[4] = std::byte{0};
    CHECK_THROWS_WITH_AS((void)span64::from_bytes(bad), doctest::Contains("version 0"), rx::argument_error);
    bad = good;
    bad[6] = std::byte{1};
    CHECK_THROWS_WITH_AS((void)span64::from_bytes(bad), doctest::Contains("reserved bits"), rx::argument_error);
    CHECK_THROWS_WITH_AS((void)rx::remote_span<std::uint32_t>::from_bytes(good),
                         doctest::Contains("elements of 8 bytes"), rx::argument_error);
    bad = good;
    bad[16] = std::byte{0xff}; // 2^64 / 8 elements and more: the byte length overflows
    CHECK_THROWS_WITH_AS((void)span64::from_bytes(bad), doctest::Contains("overflow"), rx::argument_error);
}
