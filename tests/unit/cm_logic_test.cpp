// Unit tests of the RDMA CM's pure logic (no device): event names, error mapping, private
// data limits, addresses.
#include "rdmacxx/cm/connection.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <vector>

namespace cm = rdmacxx::cm;

TEST_CASE("cm: event types have the librdmacm values and names") {
    static_assert(static_cast<int>(cm::event_type::established) == RDMA_CM_EVENT_ESTABLISHED);
    static_assert(static_cast<int>(cm::event_type::timewait_exit) == RDMA_CM_EVENT_TIMEWAIT_EXIT);
    for (int t = RDMA_CM_EVENT_ADDR_RESOLVED; t <= RDMA_CM_EVENT_TIMEWAIT_EXIT; ++t)
        CHECK(std::string{cm::to_string(static_cast<cm::event_type>(t))} != "unknown");
    CHECK(std::string{cm::to_string(cm::event_type::connect_request)} == "connect_request");
    CHECK(cm::is_failure(cm::event_type::rejected));
    CHECK_FALSE(cm::is_failure(cm::event_type::established));
}

TEST_CASE("cm: failure events become the matching error type with status, reason and private data") {
    std::vector<std::byte> const pd{std::byte{1}, std::byte{2}};
    auto thrown = [&](cm::event_type t, int status) -> std::unique_ptr<cm::cm_error> {
        try {
            rdmacxx::detail::throw_cm_event(t, status, "testing", pd);
        } catch (cm::route_not_found_error const& e) {
            return std::make_unique<cm::route_not_found_error>(e);
        } catch (cm::cm_error const& e) {
            return std::make_unique<cm::cm_error>(e);
        }
        return nullptr;
    };
    try {
        rdmacxx::detail::throw_cm_event(cm::event_type::rejected, 28, "connecting to x", pd);
        FAIL("did not throw");
    } catch (cm::rejected_error const& e) {
        CHECK(e.by_consumer());
        CHECK(e.reason() == 28);
        CHECK(e.code().category() == cm::reject_category());
        CHECK(e.private_data().size() == 2);
        CHECK(std::string{e.what()} == "rejected event connecting to x (consumer defined)");
        std::ostringstream os;
        e.dump_detailed(os, "E:", 2);
        CHECK(os.str().find("event: rejected") != std::string::npos);
    }
    CHECK_THROWS_AS(rdmacxx::detail::throw_cm_event(cm::event_type::unreachable, -ETIMEDOUT, "x"),
                    cm::unreachable_error);
    CHECK_THROWS_AS(rdmacxx::detail::throw_cm_event(cm::event_type::addr_error, -ETIMEDOUT, "x"), cm::address_error);
    CHECK_THROWS_AS(rdmacxx::detail::throw_cm_event(cm::event_type::route_error, -ETIMEDOUT, "x"), cm::route_error);
    CHECK_THROWS_AS(rdmacxx::detail::throw_cm_event(cm::event_type::connect_error, -ECONNRESET, "x"),
                    cm::connect_error);
    auto const nr = thrown(cm::event_type::addr_error, -ENETUNREACH);
    REQUIRE(nr != nullptr);
    CHECK(dynamic_cast<cm::route_not_found_error*>(nr.get()) != nullptr);
    CHECK(nr->code() == std::error_code{ENETUNREACH, std::system_category()});
    // Every CM error is an rdmacxx::error.
    CHECK_THROWS_AS(rdmacxx::detail::throw_cm_event(cm::event_type::multicast_error, -EINVAL, "x"), rdmacxx::error);
    cm::timeout_error const t{"waiting"};
    CHECK(t.code() == std::error_code{ETIMEDOUT, std::system_category()});
    CHECK(std::string{cm::reject_reason_name(8)} == "invalid service ID");
    CHECK(cm::reject_category().message(99) == "reject reason 99");
}

TEST_CASE("cm: private data over the limit of its message is refused before anything is sent") {
    using m = cm::private_data_message;
    CHECK(cm::max_private_data(m::connect, cm::port_space::tcp) == 56);
    CHECK(cm::max_private_data(m::accept, cm::port_space::tcp) == 196);
    CHECK(cm::max_private_data(m::reject, cm::port_space::tcp) == 148);
    CHECK(cm::max_private_data(m::connect, cm::port_space::udp) == 180);
    CHECK(cm::max_private_data(m::accept, cm::port_space::udp) == 136);
    std::vector<std::byte> ok(56), big(57);
    CHECK_NOTHROW(cm::check_private_data(ok, m::connect, cm::port_space::tcp));
    CHECK_THROWS_AS(cm::check_private_data(big, m::connect, cm::port_space::tcp), rdmacxx::argument_error);
    CHECK_NOTHROW(cm::check_private_data(big, m::connect, cm::port_space::udp));
    static_assert(cm::port_space_for<rdmacxx::rc> == cm::port_space::tcp);
    static_assert(cm::port_space_for<rdmacxx::ud> == cm::port_space::udp);
}

TEST_CASE("cm: addresses parse, print and know multicast") {
    auto const a = cm::address::resolve("198.18.0.1", 7471);
    CHECK(a.family() == AF_INET);
    CHECK(a.port() == 7471);
    CHECK(a.to_string() == "198.18.0.1:7471");
    CHECK(a.with_port(1).to_string() == "198.18.0.1:1");
    CHECK_FALSE(a.is_multicast());
    CHECK(cm::address::resolve("239.1.2.3", 0).is_multicast());
    CHECK(cm::address::resolve("::1", 9).to_string() == "[::1]:9");
    CHECK(cm::address::any_ipv4(5).to_string() == "0.0.0.0:5");
    CHECK(cm::address{}.to_string() == "unspecified");
    CHECK_THROWS_AS((void)cm::address::resolve("no.such.host.invalid", 1), cm::address_error);
}

TEST_CASE("cm: every step has its own timeout, falling back to the general one, and its timeout error names it") {
    using namespace std::chrono_literals;
    cm::connection_options opt;
    opt.deadlines.resolve = 1500ms;
    opt.deadlines.event = 7000ms;
    CHECK(opt.deadlines.of(cm::step::resolve_address) == 1500ms);
    CHECK(opt.deadlines.of(cm::step::resolve_route) == 1500ms);
    CHECK(opt.deadlines.of(cm::step::connect) == 7000ms);
    CHECK(opt.deadlines.of(cm::step::accept) == 7000ms);
    CHECK(opt.deadlines.of(cm::step::disconnect) == 7000ms);
    opt.deadlines.resolve_route = 300ms;
    opt.deadlines.connect = 400ms;
    opt.deadlines.accept = 500ms;
    opt.deadlines.disconnect = 600ms;
    opt.deadlines.resolve_address = 200ms;
    CHECK(opt.deadlines.of(cm::step::resolve_address) == 200ms);
    CHECK(opt.deadlines.of(cm::step::resolve_route) == 300ms);
    CHECK(opt.deadlines.of(cm::step::connect) == 400ms);
    CHECK(opt.deadlines.of(cm::step::accept) == 500ms);
    CHECK(opt.deadlines.of(cm::step::disconnect) == 600ms);
    cm::timeout_error const e{cm::step::accept, "no established event within 500 ms"};
    CHECK(e.step() == cm::step::accept);
    CHECK(std::string{e.what()}.find("accept timed out: no established") != std::string::npos);
    CHECK(e.code() == std::error_code{ETIMEDOUT, std::system_category()});
    CHECK(cm::timeout_error{"waiting"}.step() == cm::step::other);
    CHECK(std::string{cm::to_string(cm::step::resolve_route)} == "resolve route");
}
