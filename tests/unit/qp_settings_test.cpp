// qp_settings: the one validator and the one mapping onto a transition's attributes, checked
// without a device (a device's limits are a plain struct here).
#include "rdmacxx/qp_settings.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string>

namespace rx = rdmacxx;
using namespace std::chrono_literals;

namespace {

ibv_device_attr device(int init_rd_atom = 16, int rd_atom = 32, ibv_atomic_cap atomics = IBV_ATOMIC_HCA) {
    ibv_device_attr dev{};
    dev.max_qp_init_rd_atom = init_rd_atom;
    dev.max_qp_rd_atom = rd_atom;
    dev.atomic_cap = atomics;
    return dev;
}

std::string refusal(rx::qp_settings const& s, ibv_qp_type type, ibv_device_attr const& dev) {
    try {
        rx::detail::validate(s, type, dev, "QP 7", "; nothing was sent");
    } catch (rx::argument_error const& e) {
        return e.what();
    }
    return {};
}

} // namespace

TEST_CASE("qp_settings: the validator passes the defaults and refuses each bad field, naming it") {
    auto const dev = device();
    CHECK(refusal({}, IBV_QPT_RC, dev).empty());
    CHECK(refusal({}, IBV_QPT_UC, dev).empty());
    CHECK(refusal({}, IBV_QPT_UD, dev).empty());

    rx::qp_settings s;
    s.retry_count = 8;
    CHECK(refusal(s, IBV_QPT_RC, dev).find("retry_count 8") != std::string::npos);
    s = {};
    s.rnr_retry_count = 8;
    CHECK(refusal(s, IBV_QPT_RC, dev).find("rnr_retry_count 8") != std::string::npos);
    s = {};
    s.service_level = 16;
    CHECK(refusal(s, IBV_QPT_RC, dev).find("service level 16") != std::string::npos);
    s = {};
    s.flow_label = rx::max_flow_label + 1;
    CHECK(refusal(s, IBV_QPT_RC, dev).find("over 20 bits") != std::string::npos);
    s = {};
    s.initiator_depth = 17;
    CHECK(refusal(s, IBV_QPT_RC, dev).find("max_qp_init_rd_atom of 16") != std::string::npos);
    s.initiator_depth = 16;
    CHECK(refusal(s, IBV_QPT_RC, dev).empty());
    s = {};
    s.responder_resources = 33;
    CHECK(refusal(s, IBV_QPT_RC, dev).find("max_qp_rd_atom of 32") != std::string::npos);
    s = {};
    s.remote_access = rx::access::remote_atomic;
    CHECK(refusal(s, IBV_QPT_RC, device(16, 32, IBV_ATOMIC_NONE)).find("atomic_cap") != std::string::npos);
    CHECK(refusal(s, IBV_QPT_RC, dev).empty());
    s = {};
    s.path_mtu = ibv_mtu{}; // the old spelling of "the port's": now an empty optional
    CHECK(refusal(s, IBV_QPT_RC, dev).find("is not an MTU") != std::string::npos);
    s.path_mtu = static_cast<ibv_mtu>(6);
    CHECK(refusal(s, IBV_QPT_RC, dev).find("is not an MTU") != std::string::npos);
    s.path_mtu = IBV_MTU_4096;
    CHECK(refusal(s, IBV_QPT_RC, dev).empty());
    // Every refusal ends with what the caller said was left untouched, and names the QP.
    s.retry_count = 9;
    std::string const msg = refusal(s, IBV_QPT_RC, dev);
    CHECK(msg.find("for QP 7; nothing was sent") != std::string::npos);
}

TEST_CASE("qp_settings: apply writes each transition's fields over the path's, with their mask bits") {
    auto const dev = device();
    rx::qp_settings s;
    s.remote_access = rx::access::remote_write | rx::access::remote_read;
    s.pkey_index = 2;
    s.path_mtu = IBV_MTU_512;
    s.service_level = 3;
    s.hop_limit = 17;
    s.traffic_class = 0x68;
    s.flow_label = 0xabcde;
    s.min_rnr_timer = 5ms;
    s.responder_resources = 4;
    s.local_ack_timeout = 100ms;
    s.retry_count = 5;
    s.rnr_retry_count = 3;
    s.initiator_depth = 2;

    ibv_qp_attr init{};
    init.qp_state = IBV_QPS_INIT;
    int mask = IBV_QP_STATE;
    rx::detail::apply(s, IBV_QPT_RC, dev, init, mask);
    CHECK(init.pkey_index == 2);
    CHECK(init.qp_access_flags == (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
    CHECK(mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS));

    ibv_qp_attr rtr{};
    rtr.qp_state = IBV_QPS_RTR;
    rtr.path_mtu = IBV_MTU_1024; // the path's
    rtr.ah_attr.is_global = 1;
    rtr.ah_attr.grh.hop_limit = 64;
    rtr.max_dest_rd_atomic = 255;
    mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU;
    rx::detail::apply(s, IBV_QPT_RC, dev, rtr, mask);
    CHECK(rtr.path_mtu == IBV_MTU_512); // the smaller
    CHECK(rtr.ah_attr.sl == 3);
    CHECK(rtr.ah_attr.grh.hop_limit == 17);
    CHECK(rtr.ah_attr.grh.traffic_class == 0x68);
    CHECK(rtr.ah_attr.grh.flow_label == 0xabcde);
    CHECK(rtr.min_rnr_timer == 18); // 5.12 ms
    CHECK(rtr.max_dest_rd_atomic == 4);
    CHECK((mask & IBV_QP_MIN_RNR_TIMER) != 0);
    CHECK((mask & IBV_QP_MAX_DEST_RD_ATOMIC) != 0);

    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.max_rd_atomic = 255;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    rx::detail::apply(s, IBV_QPT_RC, dev, rts, mask);
    CHECK(rts.timeout == 15); // 134 ms
    CHECK(rts.retry_cnt == 5);
    CHECK(rts.rnr_retry == 3);
    CHECK(rts.max_rd_atomic == 2);
    CHECK(mask == (IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                   IBV_QP_MAX_QP_RD_ATOMIC));
}

TEST_CASE("qp_settings: empty fields keep the path's; empty depths become the path's within the device's limits") {
    auto const dev = device(16, 32);
    rx::qp_settings const s;
    ibv_qp_attr rtr{};
    rtr.qp_state = IBV_QPS_RTR;
    rtr.path_mtu = IBV_MTU_1024;
    rtr.ah_attr.is_global = 1;
    rtr.ah_attr.sl = 1;
    rtr.ah_attr.grh.hop_limit = 9;
    rtr.ah_attr.grh.traffic_class = 0x20;
    rtr.ah_attr.grh.flow_label = 77;
    rtr.max_dest_rd_atomic = 255; // the verbs path's "as many as the device allows"
    int mask = IBV_QP_STATE;
    rx::detail::apply(s, IBV_QPT_RC, dev, rtr, mask);
    CHECK(rtr.path_mtu == IBV_MTU_1024);
    CHECK(rtr.ah_attr.sl == 1);
    CHECK(rtr.ah_attr.grh.hop_limit == 9);
    CHECK(rtr.ah_attr.grh.traffic_class == 0x20);
    CHECK(rtr.ah_attr.grh.flow_label == 77);
    CHECK(rtr.max_dest_rd_atomic == 32);
    CHECK(rtr.min_rnr_timer == 14); // the default, 1.28 ms, always set

    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.max_rd_atomic = 8; // the CM's negotiated depth, within the device's 16: kept
    mask = IBV_QP_STATE;
    rx::detail::apply(s, IBV_QPT_RC, dev, rts, mask);
    CHECK(rts.max_rd_atomic == 8);
    CHECK(rts.timeout == 14);
    CHECK(rts.retry_cnt == 6);
    CHECK(rts.rnr_retry == 6);
}

TEST_CASE("qp_settings: UC keeps none of RC's fields and only remote write; UD takes the Q_Key") {
    auto const dev = device();
    rx::qp_settings s;
    s.remote_access = rx::all_remote;
    ibv_qp_attr init{};
    init.qp_state = IBV_QPS_INIT;
    int mask = IBV_QP_STATE;
    rx::detail::apply(s, IBV_QPT_UC, dev, init, mask);
    CHECK(init.qp_access_flags == (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)); // all_remote has local write

    // The CM's TCP port space gives RC's attributes; on UC they leave the mask.
    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    mask =
        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    rx::detail::apply(s, IBV_QPT_UC, dev, rts, mask);
    CHECK(mask == (IBV_QP_STATE | IBV_QP_SQ_PSN));

    ibv_qp_attr ud{};
    ud.qp_state = IBV_QPS_INIT;
    mask = IBV_QP_STATE;
    s.qkey = 0x42;
    rx::detail::apply(s, IBV_QPT_UD, dev, ud, mask);
    CHECK(ud.qkey == 0x42);
    CHECK(mask == (IBV_QP_STATE | IBV_QP_QKEY));
}
