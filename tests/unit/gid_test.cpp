#include "rdmacxx/gid.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <unordered_set>

namespace rx = rdmacxx;

TEST_CASE("gid parses and formats the IPv6 text form") {
    struct row {
        char const* text;
        char const* canonical;
    };
    row const rows[] = {
        {"fe80::2:c903:0:1492", "fe80::2:c903:0:1492"},
        {"::ffff:198.18.0.1", "::ffff:198.18.0.1"},
        {"FE80:0000:0000:0000:0002:C903:0000:1492", "fe80::2:c903:0:1492"},
        {"::", "::"},
        {"::1", "::1"},
        {"2001:db8::1", "2001:db8::1"},
    };
    for (auto const& r : rows) {
        CAPTURE(r.text);
        CHECK(rx::gid::parse(r.text).to_string() == r.canonical);
    }
}

TEST_CASE("gid exposes prefix, interface id and its kind") {
    auto const g = rx::gid::parse("fe80::2:c903:0:1492");
    CHECK(g.subnet_prefix() == 0xfe80000000000000ULL);
    CHECK(g.interface_id() == 0x0002c90300001492ULL);
    CHECK(g.is_link_local());
    CHECK_FALSE(g.is_ipv4_mapped());
    auto const v4 = rx::gid::parse("::ffff:198.18.0.1");
    CHECK(v4.is_ipv4_mapped());
    CHECK_FALSE(v4.is_link_local());
    CHECK(v4.bytes()[12] == 198);
    CHECK(v4.bytes()[15] == 1);
    CHECK(rx::gid{}.is_zero());
}

TEST_CASE("gid round-trips through ibv_gid and compares and hashes") {
    auto const a = rx::gid::parse("fe80::1");
    auto const b = rx::gid{a.native()};
    CHECK(a == b);
    CHECK(a < rx::gid::parse("fe80::2"));
    std::unordered_set<rx::gid> set{a, b, rx::gid::parse("::ffff:10.0.0.1")};
    CHECK(set.size() == 2);
}

TEST_CASE("malformed gid text is refused with the text quoted") {
    char const* bad[] = {"", "198.18.0.1", "fe80::1::2", "fe80:::1", "gggg::1", "1:2:3:4:5:6:7:8:9", "fe80::1%eth0"};
    for (char const* text : bad) {
        CAPTURE(text);
        rx::gid out = rx::gid::parse("::1");
        CHECK_FALSE(rx::gid::try_parse(text, out));
        CHECK(out == rx::gid::parse("::1"));
        try {
            (void)rx::gid::parse(text);
            FAIL("parse accepted malformed text");
        } catch (rx::argument_error const& e) {
            CHECK(std::string{e.what()}.find(std::string{"\""} + text + "\"") != std::string::npos);
            CHECK(e.code() == std::errc::invalid_argument);
        }
    }
}

TEST_CASE("guid parses both text forms and formats in groups") {
    CHECK(rx::guid::parse("0x0002c90300001492").value() == 0x0002c90300001492ULL);
    CHECK(rx::guid::parse("0002:c903:0000:1492").value() == 0x0002c90300001492ULL);
    CHECK(rx::guid::parse("2:c903:0:1492").value() == 0x0002c90300001492ULL);
    CHECK(rx::guid::parse("0xFFFFFFFFFFFFFFFF").value() == ~0ULL);
    CHECK(rx::guid{0x0002c90300001492ULL}.to_string() == "0002:c903:0000:1492");
    CHECK(rx::guid::from_network(htobe64(0x1122334455667788ULL)).value() == 0x1122334455667788ULL);
    char const* bad[] = {"", "0x", "0x1g", "0x00000000000000001", "1:2:3", "1:2:3:4:5", "12345:0:0:0", "1::2:3", "xyz"};
    for (char const* text : bad) {
        CAPTURE(text);
        rx::guid out;
        CHECK_FALSE(rx::guid::try_parse(text, out));
        CHECK_THROWS_AS((void)rx::guid::parse(text), rx::argument_error);
    }
}

TEST_CASE("gid and guid text with an embedded NUL is refused, not cut short at the NUL") {
    using namespace std::string_view_literals;
    for (std::string_view const text : {"::1\0garbage"sv, "::1\0"sv, "\0::1"sv, "fe80::1\0:2"sv}) {
        CAPTURE(std::string{text});
        rx::gid out = rx::gid::parse("fe80::9");
        CHECK_FALSE(rx::gid::try_parse(text, out));
        CHECK(out == rx::gid::parse("fe80::9"));
        CHECK_THROWS_WITH_AS((void)rx::gid::parse(text), doctest::Contains("holds a NUL character"),
                             rx::argument_error);
    }
    // The message quotes the text whole, the NUL written as \0.
    CHECK_THROWS_WITH_AS((void)rx::gid::parse("::1\0garbage"sv),
                         "cannot parse GID \"::1\\0garbage\": the text holds a NUL character (Invalid argument)",
                         rx::argument_error);
    for (std::string_view const text : {"0x12\0"sv, "0002:c903:0000:1492\0"sv, "0x1\0002"sv}) {
        rx::guid out{5};
        CHECK_FALSE(rx::guid::try_parse(text, out));
        CHECK(out.value() == 5);
        CHECK_THROWS_AS((void)rx::guid::parse(text), rx::argument_error);
    }
}
