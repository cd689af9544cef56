// Discovery on the real device: the device list, GUIDs, GID and P_Key tables against sysfs,
// port attributes, GID selection and get_end_port's grammar.
#include "fixture.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace rx = rdmacxx;

namespace {

/// The first line of a sysfs file, or "" when it cannot be read (an empty GID slot's type).
std::string sysfs(std::string const& path) {
    std::ifstream in(path);
    std::string line;
    if (!in || !std::getline(in, line)) return {};
    return line;
}

std::string port_dir(std::string_view dev, unsigned port) {
    return "/sys/class/infiniband/" + std::string{dev} + "/ports/" + std::to_string(port);
}

std::string test_device_name() {
    char const* const name = std::getenv("RDMACXX_DEVICE");
    REQUIRE_MESSAGE(name != nullptr, "RDMACXX_DEVICE is not set: run under tools/softroce");
    return name;
}

std::string error_text(auto&& f) {
    try {
        f();
    } catch (rx::error const& e) {
        return e.what();
    }
    return "(nothing thrown)";
}

} // namespace

TEST_CASE("discovery: the device is listed with its name, GUID, index and types, as sysfs has them") {
    std::string const name = test_device_name();
    rx::device_list const devices;
    REQUIRE_FALSE(devices.empty());
    CHECK(std::any_of(devices.begin(), devices.end(), [&](rx::device d) { return d.name() == name; }));
    CHECK(devices.describe().find(name) != std::string::npos);

    rx::device const dev = devices.find(name);
    std::string const node_guid = sysfs("/sys/class/infiniband/" + name + "/node_guid");
    REQUIRE_FALSE(node_guid.empty());
    CHECK(dev.guid().to_string() == node_guid);
    CHECK(rx::guid::parse(node_guid) == dev.guid());
    CHECK(devices.find(dev.guid()).name() == name);

    // The kernel's stable index (6.1 reports it; ENOTSUP would be a sys_error).
    int const index = dev.index();
    CHECK(index >= 0);

    // sysfs node_type is "1: CA"; rxe is a channel adapter over the InfiniBand transport (RoCE).
    CHECK(sysfs("/sys/class/infiniband/" + name + "/node_type") == "1: CA");
    CHECK(dev.node_type() == IBV_NODE_CA);
    CHECK(dev.node_type_name() == "InfiniBand channel adapter");
    CHECK(dev.transport_type_name() == "InfiniBand");

    try {
        (void)devices.find(rx::guid{0x0123456789abcdefULL});
        FAIL("found a device with a made-up GUID");
    } catch (rx::argument_error const& e) {
        CHECK(std::string{e.what()}.find("0123:4567:89ab:cdef") != std::string::npos);
        CHECK(std::string{e.what()}.find(name) != std::string::npos);
    }
}

TEST_CASE("discovery: port attributes, GID table and P_Key table match sysfs") {
    std::string const name = test_device_name();
    rx::context ctx = test::open_test_device();
    REQUIRE(ctx.port_count() >= 1);
    CHECK(ctx.port_count() == 1); // rxe has one port
    auto const attr = ctx.query_device();
    CHECK(attr.orig_attr.phys_port_cnt == ctx.port_count());
    CHECK(rx::guid::from_network(attr.orig_attr.node_guid) == ctx.device().guid());

    std::string const dir = port_dir(name, 1);
    auto const port = ctx.query_port(1);
    CHECK(port.active());
    CHECK(port.state_name() == "active");
    CHECK(sysfs(dir + "/state") == "4: ACTIVE");
    CHECK(port.link_layer_name() == sysfs(dir + "/link_layer"));
    CHECK(port.link_layer_name() == "Ethernet");
    CHECK(port.lid() == 0);
    CHECK(port.active_mtu_bytes() == 1024); // netdev MTU 1500
    // sysfs "rate" reads like "10 Gb/sec (4X QDR)": the width is ours.
    std::string const rate = sysfs(dir + "/rate");
    CAPTURE(rate);
    CHECK(rate.find("(" + std::string{port.width_name()}) != std::string::npos);
    CHECK(port.speed_name() != "unknown");

    // GID table: every populated sysfs slot, with its type and network device, and no other.
    auto const table = ctx.gid_table(1);
    REQUIRE_FALSE(table.empty());
    int populated = 0;
    for (int i = 0; i < port.gid_table_length(); ++i) {
        auto const idx = std::to_string(i);
        auto const text = sysfs(dir + "/gids/" + idx);
        if (text.empty() || rx::gid::parse(text).is_zero()) continue;
        ++populated;
        CAPTURE(text);
        auto const it = std::find_if(table.begin(), table.end(),
                                     [&](rx::gid_entry const& e) { return e.index == static_cast<std::uint32_t>(i); });
        REQUIRE(it != table.end());
        CHECK(it->gid == rx::gid::parse(text));
        CHECK(it->gid == ctx.query_gid(1, i));
        std::string const type = sysfs(dir + "/gid_attrs/types/" + idx);
        CHECK(type == (it->type == rx::gid_type::roce_v2 ? "RoCE v2" : "IB/RoCE v1"));
        CHECK(it->netdev_name() == sysfs(dir + "/gid_attrs/ndevs/" + idx));
        CHECK(it->netdev_up());
    }
    CHECK(static_cast<std::size_t>(populated) == table.size());

    // P_Key table: one value per slot, as sysfs prints them ("0xffff").
    auto const pkeys = ctx.pkey_table(1);
    REQUIRE(pkeys.size() == port.pkey_table_length());
    REQUIRE_FALSE(pkeys.empty());
    CHECK(pkeys[0] == 0xffff);
    for (std::size_t i = 0; i < pkeys.size(); ++i) {
        std::string const text = sysfs(dir + "/pkeys/" + std::to_string(i));
        if (text.empty()) continue;
        CAPTURE(i);
        CHECK(std::stoul(text, nullptr, 16) == pkeys[i]);
    }
}

TEST_CASE("discovery: GID selection picks the routable RoCE v2 GID and can be overridden") {
    rx::context ctx = test::open_test_device();
    auto const chosen = ctx.select_gid(1);
    CHECK(chosen.type == rx::gid_type::roce_v2);
    CHECK(chosen.gid.is_ipv4_mapped());
    CHECK_FALSE(chosen.gid.is_link_local());
    CHECK(chosen.netdev_up());
    if (char const* addr = std::getenv("RDMACXX_ADDR"); addr != nullptr && *addr != '\0')
        CHECK(chosen.gid == rx::gid::parse(std::string{"::ffff:"} + addr));
    CHECK(rx::end_port{ctx}.gid().index == chosen.index);

    // Overrides: an index, an address, a type.
    rx::gid_selector by_index;
    by_index.index = 0;
    auto const first = ctx.select_gid(1, by_index);
    CHECK(first.index == 0);
    CHECK(first.gid.is_link_local());
    CHECK(rx::end_port(ctx, 1, 0).gid().gid == first.gid);
    rx::gid_selector by_address;
    by_address.address = first.gid;
    CHECK(ctx.select_gid(1, by_address).index == 0);

    // What the port does not have is refused, naming the port, the request and the table.
    rx::gid_selector v1;
    v1.type = rx::gid_type::roce_v1;
    bool const has_v1 = [&] {
        for (auto const& e : ctx.gid_table(1))
            if (e.type == rx::gid_type::roce_v1) return true;
        return false;
    }();
    if (has_v1) {
        CHECK(ctx.select_gid(1, v1).type == rx::gid_type::roce_v1);
    } else {
        std::string const what = error_text([&] { (void)ctx.select_gid(1, v1); });
        CAPTURE(what);
        CHECK(what.find("/1 has no a RoCE v1 GID") == std::string::npos); // grammar guard
        CHECK(what.find("has no a RoCE v1 GID") == std::string::npos);
        CHECK(what.find("RoCE v1 GID") != std::string::npos);
        CHECK(what.find(chosen.gid.to_string()) != std::string::npos);
    }
    rx::gid_selector bad_index;
    bad_index.index = 999;
    std::string const what = error_text([&] { (void)rx::end_port(ctx, 1, 999); });
    CAPTURE(what);
    CHECK(what.find("GID index 999") != std::string::npos);
    CHECK(what.find(std::string{ctx.name()} + "/1") != std::string::npos);
    CHECK_THROWS_AS((void)ctx.select_gid(1, bad_index), rx::argument_error);
}

TEST_CASE("discovery: get_end_port resolves the device, device/port, RoCE v2 GID and GUID to the same port") {
    std::string const name = test_device_name();
    rx::context ctx = test::open_test_device();
    auto const v2 = ctx.select_gid(1);
    auto const node_guid = ctx.device().guid();
    auto const port_guid = rx::guid{ctx.query_gid(1, 0).interface_id()};

    std::string const descriptions[] = {
        "",
        name,
        name + "/1",
        v2.gid.to_string(),
        node_guid.to_string(),
        "0x" + node_guid.to_string().substr(0, 4) + node_guid.to_string().substr(5, 4) +
            node_guid.to_string().substr(10, 4) + node_guid.to_string().substr(15, 4),
        port_guid.to_string(),
    };
    for (auto const& d : descriptions) {
        CAPTURE(d);
        rx::opened_end_port const where = rx::get_end_port(d);
        CHECK(where.context().name() == name);
        CHECK(where.port_num() == 1);
        CHECK(where.to_string() == name + "/1");
        CHECK(where.gid().gid == v2.gid); // the GID named, or the one selection picks: the same here
        CHECK(where.gid().type == rx::gid_type::roce_v2);
        CHECK(where.attributes().active());
        rx::end_port const& port = where; // usable wherever an end_port is
        CHECK(port.describe().find(v2.gid.to_string()) != std::string::npos);
    }

    // The GID form uses the GID it names, even the link-local one; a selector can still override.
    auto const link_local = ctx.query_gid(1, 0);
    CHECK(rx::get_end_port(link_local.to_string()).gid().index == 0);
    rx::gid_selector idx1;
    idx1.index = v2.index;
    CHECK(rx::get_end_port(link_local.to_string(), idx1).gid().gid == v2.gid);

    // The opened end port moves without invalidating the end_port inside.
    rx::opened_end_port a = rx::get_end_port(name + "/1");
    rx::opened_end_port b = std::move(a);
    CHECK(&b.port().context() == &b.context());
    CHECK(b.port().context().query_port(1).active());
}

TEST_CASE("discovery: get_end_port refuses what does not exist, naming what was asked and what exists") {
    std::string const name = test_device_name();
    struct row {
        std::string text;
        std::string must_name; // besides the text itself
    };
    row const rows[] = {
        {name + "/2", name + "/1"},      {"nosuch0", "devices: " + name},  {"nosuch0/1", "devices: " + name},
        {"::ffff:203.0.113.9", "GIDs:"}, {"0x0123456789abcdef", "GUIDs:"},
    };
    for (auto const& r : rows) {
        CAPTURE(r.text);
        try {
            (void)rx::get_end_port(r.text);
            FAIL("resolved an end port that does not exist");
        } catch (rx::argument_error const& e) {
            std::string const what = e.what();
            CAPTURE(what);
            CHECK(e.code() == std::errc::no_such_device);
            CHECK(what.find("\"" + r.text + "\"") != std::string::npos);
            CHECK(what.find(r.must_name) != std::string::npos);
        }
    }
    // Malformed text is a different error: invalid argument, before any device is opened.
    try {
        (void)rx::get_end_port(name + "/0");
        FAIL("port 0 accepted");
    } catch (rx::argument_error const& e) {
        CHECK(e.code() == std::errc::invalid_argument);
    }
}

TEST_CASE("discovery: a route error names the GID chosen on this side and the remote one") {
    rx::opened_end_port const where = rx::get_end_port("");
    rx::protection_domain pd{where.context()};
    rx::completion_queue<rx::busy_poll> cq{where.context(), 16};
    rx::queue_pair<rx::rc, rx::busy_poll> a{pd, cq, cq, {}}, b{pd, cq, cq, {}};
    auto remote = b.local_endpoint(where);
    // The kernel finds no route (and no device) to 0.0.0.0: ibv_modify_qp to RTR fails with
    // ENODEV on rxe. (rxe accepts unroutable unicast addresses at RTR and fails later.)
    remote.gid = rx::gid::parse("::ffff:0.0.0.0");
    try {
        a.connect(where, remote);
        FAIL("connected to an unroutable GID");
    } catch (rx::sys_error const& e) {
        std::string const what = e.what();
        CAPTURE(what);
        CHECK(e.verb() == "ibv_modify_qp");
        CHECK(what.find(where.port().describe()) != std::string::npos);
        CHECK(what.find("to GID ::ffff:0.0.0.0") != std::string::npos);
        std::ostringstream dump;
        e.dump_detailed(dump, "E:", 1);
        std::cout << "route error:\n" << dump.str();
    }
}
