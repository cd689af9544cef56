#include "rdmacxx/async.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <sstream>
#include <string>

namespace rx = rdmacxx;

TEST_CASE("async: event types map to the object they affect and to error or not") {
    struct row {
        ibv_event_type type;
        rx::async_object object;
        bool error;
    };
    row const rows[] = {
        {IBV_EVENT_CQ_ERR, rx::async_object::cq, true},
        {IBV_EVENT_QP_FATAL, rx::async_object::qp, true},
        {IBV_EVENT_QP_REQ_ERR, rx::async_object::qp, true},
        {IBV_EVENT_QP_ACCESS_ERR, rx::async_object::qp, true},
        {IBV_EVENT_COMM_EST, rx::async_object::qp, false},
        {IBV_EVENT_SQ_DRAINED, rx::async_object::qp, false},
        {IBV_EVENT_PATH_MIG, rx::async_object::qp, false},
        {IBV_EVENT_PATH_MIG_ERR, rx::async_object::qp, true},
        {IBV_EVENT_QP_LAST_WQE_REACHED, rx::async_object::qp, false},
        {IBV_EVENT_SRQ_ERR, rx::async_object::srq, true},
        {IBV_EVENT_SRQ_LIMIT_REACHED, rx::async_object::srq, false},
        {IBV_EVENT_WQ_FATAL, rx::async_object::wq, true},
        {IBV_EVENT_PORT_ACTIVE, rx::async_object::port, false},
        {IBV_EVENT_PORT_ERR, rx::async_object::port, false},
        {IBV_EVENT_LID_CHANGE, rx::async_object::port, false},
        {IBV_EVENT_PKEY_CHANGE, rx::async_object::port, false},
        {IBV_EVENT_SM_CHANGE, rx::async_object::port, false},
        {IBV_EVENT_CLIENT_REREGISTER, rx::async_object::port, false},
        {IBV_EVENT_GID_CHANGE, rx::async_object::port, false},
        {IBV_EVENT_DEVICE_FATAL, rx::async_object::device, true},
    };
    for (auto const& r : rows) {
        CAPTURE(::ibv_event_type_str(r.type));
        CHECK(rx::affected_object(r.type) == r.object);
        CHECK(rx::is_error_event(r.type) == r.error);
    }
    static_assert(rx::affected_object(IBV_EVENT_QP_ACCESS_ERR) == rx::async_object::qp);
    static_assert(rx::to_string(rx::async_object::srq) == "SRQ");
}

TEST_CASE("async: async_error carries the event type as an error_code and dumps levels 0, 1 and 2") {
    rx::async_error e(IBV_EVENT_QP_ACCESS_ERR, "rxe0", "QP 17", 17);
    CHECK(e.code() == rx::make_async_error_code(IBV_EVENT_QP_ACCESS_ERR));
    CHECK(e.code().category() == rx::async_category());
    CHECK(e.code().message() == "local access violation work queue error");
    CHECK(e.event_type() == IBV_EVENT_QP_ACCESS_ERR);
    CHECK(e.qp_num() == 17);
    CHECK(e.port_num() == 0);
    CHECK(std::string{e.what()} == "asynchronous event \"local access violation work queue error\" on rxe0 for QP 17 "
                                   "(local access violation work queue error)");
    e.push_context("Failed serving client 198.18.0.2");
    std::ostringstream l0, l1, l2;
    e.dump_detailed(l0, "E:", 0);
    e.dump_detailed(l1, "E:", 1);
    e.dump_detailed(l2, "E:", 2);
    CHECK(l0.str() == "E: Failed serving client 198.18.0.2\n");
    CHECK(l1.str() == "E: Failed serving client 198.18.0.2\n"
                      "E: +asynchronous event \"local access violation work queue error\" on rxe0 for QP 17\n"
                      "E: +rdmacxx.async_event 3: local access violation work queue error\n");
    CHECK(l2.str() == l1.str() + "E:   event: local access violation work queue error (3)\n"
                                 "E:   device: rxe0\n"
                                 "E:   affected: QP 17\n"
                                 "E:   qp_num: 17\n");
    CHECK_THROWS_AS(throw e, rx::error);
}

TEST_CASE("async: a port event names its port and device, acknowledges itself and raises only when an error") {
    // Port events carry no object to count acknowledgements against, so a hand-made one is safe
    // to acknowledge without a device.
    ibv_device dev{};
    std::strcpy(dev.name, "fake0");
    ibv_context ctx{};
    ctx.device = &dev;
    ibv_async_event raw{};
    raw.event_type = IBV_EVENT_PORT_ERR;
    raw.element.port_num = 1;
    rx::async_event ev{&ctx, raw};
    CHECK(ev.pending());
    CHECK(ev.type() == IBV_EVENT_PORT_ERR);
    CHECK(ev.name() == "port error");
    CHECK(ev.object() == rx::async_object::port);
    CHECK(ev.port_num() == 1);
    CHECK(ev.qp() == nullptr);
    CHECK(ev.cq() == nullptr);
    CHECK(ev.qp_num() == 0);
    CHECK_FALSE(ev.is_error());
    CHECK(ev.to_string() == "port error on fake0 for port 1");
    CHECK_NOTHROW(ev.raise_if_error());
    rx::async_event moved = std::move(ev);
    CHECK_FALSE(ev.pending()); // NOLINT(bugprone-use-after-move): the moved-from event is inert
    CHECK(moved.pending());
    moved.ack();
    CHECK_FALSE(moved.pending());

    raw.event_type = IBV_EVENT_DEVICE_FATAL;
    rx::async_event fatal{&ctx, raw};
    CHECK(fatal.is_error());
    CHECK(fatal.port_num() == 0);
    try {
        fatal.raise_if_error();
        FAIL("a device-fatal event was not raised");
    } catch (rx::async_error const& e) {
        CHECK(e.event_type() == IBV_EVENT_DEVICE_FATAL);
        CHECK(e.device() == "fake0");
        CHECK(e.affected() == "device");
        CHECK_FALSE(fatal.pending());
    }
}

TEST_CASE("async: route errors name the chosen GID through end_port::describe and gid_entry::to_string") {
    rx::gid_entry e{1, rx::gid::parse("::ffff:198.18.0.1"), rx::gid_type::roce_v2, 0};
    CHECK(e.to_string() == "[1] ::ffff:198.18.0.1 RoCE v2");
    CHECK_FALSE(e.netdev_up()); // no network device
}
