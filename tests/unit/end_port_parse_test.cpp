#include "rdmacxx/end_port.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace rx = rdmacxx;
using form = rx::end_port_description::form;

TEST_CASE("end_port: valid descriptions parse to their form, table-driven") {
    struct row {
        char const* text;
        form kind;
        char const* device; // device name, "" when none
        unsigned port;      // port, 0 when none
        char const* gid;    // canonical GID text, "" when not a GID
        std::uint64_t guid; // GUID value, 0 when not a GUID
    };
    row const rows[] = {
        {"", form::any, "", 0, "", 0},
        {"rxe0", form::device, "rxe0", 0, "", 0},
        {"mlx5_0", form::device, "mlx5_0", 0, "", 0},
        {"ibp1s0f1", form::device, "ibp1s0f1", 0, "", 0},
        {"roce-dev.2", form::device, "roce-dev.2", 0, "", 0},
        {"A", form::device, "A", 0, "", 0},
        {"abcd", form::device, "abcd", 0, "", 0}, // hex-looking, but no 0x and no colon: a name
        {"rxe0/1", form::device_port, "rxe0", 1, "", 0},
        {"mlx5_0/2", form::device_port, "mlx5_0", 2, "", 0},
        {"mlx4_0/255", form::device_port, "mlx4_0", 255, "", 0},
        {"rxe0/007", form::device_port, "rxe0", 7, "", 0},
        {"fe80::2:c903:0:1492", form::gid, "", 0, "fe80::2:c903:0:1492", 0},
        {"::ffff:198.18.0.1", form::gid, "", 0, "::ffff:198.18.0.1", 0},
        {"FE80:0:0:0:2:C903:0:1492", form::gid, "", 0, "fe80::2:c903:0:1492", 0},
        {"2001:db8::1", form::gid, "", 0, "2001:db8::1", 0},
        {"::1", form::gid, "", 0, "::1", 0},
        {"fe80::a0bf:22ff:fec5:fa6c", form::gid, "", 0, "fe80::a0bf:22ff:fec5:fa6c", 0},
        {"0002:c903:0000:1492", form::guid, "", 0, "", 0x0002c90300001492ULL},
        {"2:c903:0:1492", form::guid, "", 0, "", 0x0002c90300001492ULL},
        {"0x0002c90300001492", form::guid, "", 0, "", 0x0002c90300001492ULL},
        {"0X0002C90300001492", form::guid, "", 0, "", 0x0002c90300001492ULL},
        {"0x1", form::guid, "", 0, "", 1},
        {"a0bf:22ff:fec5:fa6c", form::guid, "", 0, "", 0xa0bf22fffec5fa6cULL},
    };
    for (auto const& r : rows) {
        CAPTURE(r.text);
        auto const d = rx::end_port_description::parse(r.text);
        CHECK(d.kind() == r.kind);
        CHECK(d.text() == r.text);
        CHECK(d.device_name() == r.device);
        CHECK(d.port_num() == r.port);
        if (r.kind == form::gid)
            CHECK(d.gid().to_string() == r.gid);
        else
            CHECK(d.gid().is_zero());
        CHECK(d.guid().value() == r.guid);
        rx::end_port_description out;
        CHECK(rx::end_port_description::try_parse(r.text, out));
        CHECK(out.kind() == r.kind);
    }
}

TEST_CASE("end_port: malformed descriptions are refused, quoting the text and saying what is wrong") {
    struct row {
        char const* text;
        char const* why; // a piece of the reason
    };
    row const rows[] = {
        {"rxe0/", "port number after '/' is missing"},
        {"/1", "device name is empty"},
        {"/", "device name is empty"},
        {"rxe0/0", "port 0 does not exist"},
        {"rxe0/256", "out of range"},
        {"rxe0/99999999999999999999", "out of range"},
        {"rxe0/-1", "not a decimal number"},
        {"rxe0/+1", "not a decimal number"},
        {"rxe0/1/2", "not a decimal number"},
        {"rxe0/x", "not a decimal number"},
        {"rxe0/ 1", "not a decimal number"},
        {"rxe 0", "character ' '"},
        {" rxe0", "character ' '"},
        {"rxe0%", "character '%'"},
        {"rxe0\t", "character '\t'"},
        {"..", "not a device name"},
        {"..", "\"..\""},
        {"0x1g", "not a GUID"},
        {"0x00000000000000001", "not a GUID"},
        {"0x-1", "not a GUID"},
        {"fe80::1::2", "neither a GID"},
        {"fe80:::1", "neither a GID"},
        {"gggg::1", "neither a GID"},
        {"1:2:3", "neither a GID"},
        {"1:2:3:4:5", "neither a GID"},
        {"12345:0:0:0", "neither a GID"},
        {"1:2:3:4:5:6:7:8:9", "neither a GID"},
        {"fe80::1%eth0", "neither a GID"},
        {"198.18.0.1:1", "neither a GID"},
        {"rxe0:1", "neither a GID"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "longer than 63"}, // 64
    };
    for (auto const& r : rows) {
        std::string const text = r.text;
        CAPTURE(text);
        rx::end_port_description out = rx::end_port_description::parse("rxe0/1");
        CHECK_FALSE(rx::end_port_description::try_parse(text, out));
        CHECK(out.kind() == form::device_port); // left alone
        try {
            (void)rx::end_port_description::parse(text);
            FAIL("parse accepted malformed text");
        } catch (rx::argument_error const& e) {
            std::string const what = e.what();
            CHECK(what.find("\"" + text + "\"") != std::string::npos);
            CHECK(what.find(r.why) != std::string::npos);
            CHECK(e.code() == std::errc::invalid_argument);
        }
    }
}

TEST_CASE("end_port: a 63-character name is the longest, and \"0x\" alone is a name") {
    std::string const name(63, 'b');
    CHECK(rx::end_port_description::parse(name).device_name() == name);
    CHECK(rx::end_port_description::parse(name + "/1").port_num() == 1);
    auto const d = rx::end_port_description::parse("0x");
    CHECK(d.kind() == form::device);
    CHECK(d.device_name() == "0x");
}

TEST_CASE("end_port: a GID with the colon is never read as a device, a GUID never as a GID") {
    // Four groups are a GUID (not valid IPv6); eight groups are a GID.
    CHECK(rx::end_port_description::parse("0:0:0:1").kind() == form::guid);
    CHECK(rx::end_port_description::parse("0:0:0:0:0:0:0:1").kind() == form::gid);
    CHECK(rx::end_port_description::parse("0:0:0:0:0:0:0:1").gid() == rx::gid::parse("::1"));
}

TEST_CASE("end_port: a description with an embedded NUL is refused, not cut short at the NUL") {
    using namespace std::string_view_literals;
    for (std::string_view const text :
         {"::1\0garbage"sv, "rxe0\0/1"sv, "rxe0/1\0"sv, "0x12\0"sv, "\0"sv, "0002:c903:0000:1492\0x"sv}) {
        CAPTURE(std::string{text});
        rx::end_port_description out = rx::end_port_description::parse("rxe0/1");
        CHECK_FALSE(rx::end_port_description::try_parse(text, out));
        CHECK(out.kind() == form::device_port);
        CHECK_THROWS_WITH_AS((void)rx::end_port_description::parse(text), doctest::Contains("NUL character at offset"),
                             rx::argument_error);
    }
    CHECK_THROWS_WITH_AS((void)rx::end_port_description::parse("::1\0garbage"sv),
                         "invalid end port description \"::1\\0garbage\": the text holds a NUL character at offset 3 "
                         "(Invalid argument)",
                         rx::argument_error);
}
