#include "rdmacxx/memory.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <type_traits>

namespace rx = rdmacxx;

static_assert(std::is_trivially_copyable_v<rx::local_span<int>>);
static_assert(std::is_trivially_copyable_v<rx::remote_span<int>>);
static_assert(std::is_standard_layout_v<rx::remote_span<std::byte>>);
static_assert(sizeof(rx::local_span<std::byte>) == 24);
static_assert(sizeof(rx::remote_span<std::byte>) == 24);
static_assert(std::is_convertible_v<rx::local_span<int>, rx::local_span<int const>>);
static_assert(!std::is_convertible_v<rx::local_span<int const>, rx::local_span<int>>);

TEST_CASE("local_span narrows within itself and refuses to leave") {
    std::array<std::uint32_t, 16> buf{};
    auto const s = rx::local_span<std::uint32_t>::assume_registered(buf.data(), buf.size(), 0x1234);
    CHECK(s.size_bytes() == 64);
    CHECK(s.first(4).data() == buf.data());
    CHECK(s.last(4).data() == buf.data() + 12);
    CHECK(s.subspan(2, 3).size() == 3);
    CHECK(s.subspan(2).size() == 14);
    CHECK(s.subspan(16).empty());
    CHECK(s.subspan(5, 2).lkey() == 0x1234);
    auto const sge = s.subspan(1, 2).sge();
    CHECK(sge.addr == reinterpret_cast<std::uintptr_t>(buf.data() + 1));
    CHECK(sge.length == 8);
    CHECK(sge.lkey == 0x1234);
    CHECK(s.as_bytes().size() == 64);
    CHECK_THROWS_AS((void)s.first(17), rx::argument_error);
    CHECK_THROWS_AS((void)s.last(17), rx::argument_error);
    CHECK_THROWS_AS((void)s.subspan(17), rx::argument_error);
    CHECK_THROWS_AS((void)s.subspan(10, 7), rx::argument_error);
    CHECK_THROWS_WITH_AS((void)s.subspan(10, 7),
                         "local_span::subspan: elements [10, 10 + 7) are outside a span of 16 "
                         "elements (Invalid argument)",
                         rx::argument_error);
}

TEST_CASE("remote_span narrows by element and keeps its rkey") {
    rx::remote_span<std::uint64_t> const r{0x10000, 8, 0xabc};
    CHECK(r.size_bytes() == 64);
    CHECK(r.subspan(2, 2).address() == 0x10010);
    CHECK(r.last(1).address() == 0x10038);
    CHECK(r.first(3).rkey() == 0xabc);
    CHECK_THROWS_AS((void)r.subspan(9), rx::argument_error);
    CHECK_THROWS_AS((void)r.first(9), rx::argument_error);
}

TEST_CASE("remote_span::as views the same remote bytes as other elements, checked") {
    rx::remote_span<std::byte> const bytes{0x10000, 64, 0xabc}; // what a peer group's rank exposes
    auto const words = bytes.as<std::uint64_t>();               // for a fetch-and-add
    static_assert(std::is_same_v<decltype(words), rx::remote_span<std::uint64_t> const>);
    CHECK(words.address() == 0x10000);
    CHECK(words.size() == 8);
    CHECK(words.rkey() == 0xabc);
    CHECK(words.as<std::byte>() == bytes); // and back
    CHECK(bytes.subspan(8, 8).as<std::uint64_t>().address() == 0x10008);
    CHECK_THROWS_AS((void)bytes.first(12).as<std::uint64_t>(), rx::argument_error);     // not whole words
    CHECK_THROWS_AS((void)bytes.subspan(4, 8).as<std::uint64_t>(), rx::argument_error); // misaligned
    CHECK(bytes.subspan(4, 8).as<std::uint32_t>().size() == 2);                         // aligned for 4-byte words
}
