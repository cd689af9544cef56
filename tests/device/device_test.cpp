#include "fixture.hpp"

#include <cstdlib>
#include <string>

namespace rx = rdmacxx;

TEST_CASE("the test device is listed, opens, and has an active port with a GID") {
    rx::device_list const devices;
    REQUIRE_FALSE(devices.empty());
    char const* const want = std::getenv("RDMACXX_DEVICE");
    if (want != nullptr) CHECK(devices.find(want).name() == want);

    rx::context ctx = test::open_test_device();
    auto const port = ctx.query_port(1);
    CHECK(port.active());
    CHECK(rx::mtu_bytes(port.active_mtu()) >= 256);
    auto const table = ctx.gid_table(1);
    REQUIRE_FALSE(table.empty());
    auto const chosen = ctx.select_gid(1);
    if (port.is_ethernet()) {
        // RoCE: a routable RoCE v2 GID is there (the IPv4 address of the netdev) and is the one chosen.
        CHECK(chosen.type == rx::gid_type::roce_v2);
        CHECK_FALSE(chosen.gid.is_link_local());
    }
    auto const attr = ctx.query_device();
    CHECK(attr.orig_attr.max_qp > 0);
}

TEST_CASE("opening a device that does not exist names it") {
    rx::device_list const devices;
    try {
        (void)devices.find("nosuch0");
        FAIL("found a device called nosuch0");
    } catch (rx::argument_error const& e) {
        std::string const what = e.what();
        CHECK(what.find("\"nosuch0\"") != std::string::npos);
        CHECK(what.find("devices:") != std::string::npos);
    }
}

TEST_CASE("a port that does not exist is refused with its name") {
    rx::context ctx = test::open_test_device();
    try {
        (void)ctx.query_port(9);
        FAIL("port 9 exists");
    } catch (rx::sys_error const& e) {
        CHECK(std::string{e.what()}.find("/9") != std::string::npos);
        CHECK(e.verb() == "ibv_query_port");
    }
}
