// The MAD error family: which error a reply's Status makes, the messages, the codes, and
// dump_detailed at levels 1 and 2 (the request and reply packets, field by field and in hex);
// make_response, the RPC's bound and the method mask agents register with.
#include "rdmacxx/mad/agent.hpp"
#include "rdmacxx/mad/error.hpp"

#include <doctest/doctest.h>

#include <cerrno>
#include <chrono>
#include <sstream>
#include <string>

namespace rx = rdmacxx;
namespace mad = rdmacxx::mad;

namespace {
mad::packet make(std::uint8_t mgmt_class, std::uint8_t class_version, std::uint8_t method, std::uint16_t attr,
                 std::uint16_t status = 0) {
    mad::packet p;
    mad::mad_header h;
    h.mgmt_class = mgmt_class;
    h.class_version = class_version;
    h.method = method;
    h.status = status;
    h.transaction_id = 0x1234;
    h.attribute_id = attr;
    p.set_header(h);
    return p;
}

std::string const rpc = "RPC MAD_METHOD_GET(1) SubnAdm(3.2) SAPathRecord(53)";
} // namespace

TEST_CASE("the kernel's 0x000C answer is a mad_error naming the status") {
    auto const req = make(mad::mgmt_class::perf_mgt, 1, mad::method::get, mad::attribute_id::port_counters);
    auto const rep =
        make(mad::mgmt_class::perf_mgt, 1, mad::method::get_resp, mad::attribute_id::port_counters, 0x000c);
    try {
        mad::detail::throw_status("RPC MAD_METHOD_GET(1) PerfMgt(4.1) PMPortCounters(18)", req, rep);
        FAIL("no throw");
    } catch (mad::mad_class_error const&) {
        FAIL("a common status is not class-specific");
    } catch (mad::mad_error const& e) {
        CHECK(std::string{e.what()} == "RPC MAD_METHOD_GET(1) PerfMgt(4.1) PMPortCounters(18) got error status 0x000c "
                                       "(the method/attribute combination is not supported)");
        CHECK(e.code() == mad::make_status_error_code(0x000c));
        CHECK(e.status() == 0x000c);
        REQUIRE(e.request());
        REQUIRE(e.reply());
        CHECK(*e.request() == req);
        CHECK(*e.reply() == rep);
    }
}

TEST_CASE("an SA class-specific status is a mad_class_error named for the SA; ERR_NO_RECORDS to a PathRecord query "
          "is sa_path_not_found_error") {
    auto const req = make(mad::mgmt_class::subn_adm, 2, mad::method::get, mad::attribute_id::path_record);
    auto const no_records =
        make(mad::mgmt_class::subn_adm, 2, mad::method::get_resp, mad::attribute_id::path_record, 0x0300);
    CHECK_THROWS_AS(mad::detail::throw_status(rpc, req, no_records), mad::sa_path_not_found_error);
    try {
        mad::detail::throw_status(rpc, req, no_records);
    } catch (mad::mad_class_error const& e) {
        CHECK(std::string{e.what()} == rpc + " got class specific error 3: ERR_NO_RECORDS (class-specific status 3)");
        CHECK(e.class_status() == 3);
        CHECK(e.code().category() == mad::status_category());
        CHECK(e.code().value() == 0x0300);
    }
    auto const denied =
        make(mad::mgmt_class::subn_adm, 2, mad::method::get_resp, mad::attribute_id::path_record, 0x0700);
    try {
        mad::detail::throw_status(rpc, req, denied);
        FAIL("no throw");
    } catch (mad::sa_path_not_found_error const&) {
        FAIL("ERR_REQ_DENIED is not 'no path'");
    } catch (mad::mad_class_error const& e) {
        CHECK(e.class_status() == 7);
        CHECK(std::string{e.what()}.find("got class specific error 7: ERR_REQ_DENIED") != std::string::npos);
    }
    // A vendor class's code is not named.
    auto const vreq = make(0x32, 1, mad::method::get, 0x10);
    auto const vrep = make(0x32, 1, mad::method::get_resp, 0x10, 0x0500);
    CHECK_THROWS_WITH_AS(mad::detail::throw_status("RPC", vreq, vrep),
                         "RPC got class specific error 5 (class-specific status 5)", mad::mad_class_error);
}

TEST_CASE("mad_timeout_error says how many tries of how long, with code ETIMEDOUT") {
    auto const req = make(0x32, 1, mad::method::get, 0x10);
    mad::mad_timeout_error e("RPC MAD_METHOD_GET(1) class 0x32 (vendor, OUI)(50.1) attribute 0x0010(16) to fe80::2",
                             req, std::chrono::milliseconds{100}, 4);
    CHECK(e.code() == std::errc::timed_out);
    CHECK(e.tries() == 4);
    CHECK(e.timeout() == std::chrono::milliseconds{100});
    CHECK_FALSE(e.reply());
    CHECK(e.status() == 0);
    CHECK(std::string{e.what()} == "RPC MAD_METHOD_GET(1) class 0x32 (vendor, OUI)(50.1) attribute 0x0010(16) to "
                                   "fe80::2 got no reply: 4 tries of 100 ms (" +
                                       std::error_code{ETIMEDOUT, std::system_category()}.message() + ")");
}

TEST_CASE("dump_detailed: level 1 stacks the context, level 2 adds both packets field by field and in hex") {
    auto const req = make(mad::mgmt_class::subn_adm, 2, mad::method::get, mad::attribute_id::path_record);
    auto const rep = make(mad::mgmt_class::subn_adm, 2, mad::method::get_resp, mad::attribute_id::path_record, 0x0300);
    try {
        try {
            mad::detail::throw_status(rpc, req, rep);
        } catch (rx::error& e) {
            e.push_context("Failed getting MAD path record for end port GID fe80::2");
            throw;
        }
    } catch (mad::sa_path_not_found_error const& e) {
        std::ostringstream l1, l2;
        e.dump_detailed(l1, "E:", 1);
        e.dump_detailed(l2, "E:", 2);
        CHECK(l1.str() == "E: Failed getting MAD path record for end port GID fe80::2\n"
                          "E: +" +
                              rpc +
                              " got class specific error 3: ERR_NO_RECORDS\n"
                              "E: +rdmacxx.mad_status 768: class-specific status 3\n");
        std::string const s = l2.str();
        REQUIRE(s.size() > l1.str().size());
        CHECK(s.find(l1.str()) == 0);
        std::string const rest = s.substr(l1.str().size());
        CHECK(rest.find("E:   request:\n"
                        "E:     MADHeader MAD_METHOD_GET(1) SubnAdm(3.2) SAPathRecord(53)\n"
                        "E:       BaseVersion: 1\n"
                        "E:       MgmtClass: 0x3\n") == 0);
        auto const reply_at = rest.find("E:   reply:\n"
                                        "E:     MADHeader MAD_METHOD_GET_RESP(129) SubnAdm(3.2) SAPathRecord(53)\n");
        REQUIRE(reply_at != std::string::npos);
        CHECK(rest.find("E:       Status: 0x300\n", reply_at) != std::string::npos);
        CHECK(rest.find("E:       (Status: class-specific status 3)\n", reply_at) != std::string::npos);
        CHECK(rest.find("E:     PathRecord\nE:       ServiceID: 0x0\n", reply_at) != std::string::npos);
        CHECK(rest.find("E:     bytes (256)\nE:         0 01030281 03000000 00000000 00001234\n"
                        "E:        16 00350000 00000000 00000000 00000000\n",
                        reply_at) != std::string::npos);
        CHECK(rest.find("E:         0 01030201 00000000 00000000 00001234\n") < reply_at); // the request's, before
    }
}

TEST_CASE("a mad_error without packets says so at level 2") {
    mad::mad_error e(std::error_code{EINVAL, std::system_category()}, "umad_send failed");
    std::ostringstream os;
    e.dump_detailed(os, "", 2);
    CHECK(os.str().find("  request: none\n  reply: none\n") != std::string::npos);
}

TEST_CASE("make_response: GetResp for a Get or a Set, with the request's TransactionID, data and the Status") {
    auto req = make(0x32, 1, mad::method::get, 0x10);
    req.set_oui(0x001405);
    req.data()[0] = std::byte{7};
    mad::packet const r = mad::make_response(req, 0x000c);
    CHECK(r.header().method == mad::method::get_resp);
    CHECK(r.header().transaction_id == 0x1234);
    CHECK(r.header().status == 0x000c);
    CHECK(r.oui() == 0x001405);
    CHECK(r.data()[0] == std::byte{7});
    CHECK(mad::make_response(make(0x32, 1, mad::method::set, 0x10)).header().method == mad::method::get_resp);
    CHECK(mad::make_response(make(0x03, 2, mad::method::get_table, 0x35)).header().method ==
          mad::method::get_table_resp);
}

TEST_CASE("rpc_options: a call waits at most (retries + 1) x timeout + grace") {
    mad::rpc_options o;
    CHECK(o.bound() == std::chrono::milliseconds{4 * 200 + 500});
    o.timeout = std::chrono::milliseconds{100};
    o.retries = 2;
    o.grace = std::chrono::milliseconds{0};
    CHECK(o.bound() == std::chrono::milliseconds{300});
}

TEST_CASE("the method mask libibumad takes has bit m set for each method served") {
    rx::detail::umad_method_mask m;
    m.set(mad::method::get);
    m.set(mad::method::set);
    m.set(127);
    auto const word = [&](unsigned bit) {
        return static_cast<unsigned long>(m.words[bit / (8 * sizeof(long))]) >> (bit % (8 * sizeof(long)));
    };
    CHECK((word(1) & 1U) == 1U);
    CHECK((word(2) & 1U) == 1U);
    CHECK((word(3) & 1U) == 0U);
    CHECK((word(127) & 1U) == 1U);
    CHECK((word(0) & 1U) == 0U);
}
