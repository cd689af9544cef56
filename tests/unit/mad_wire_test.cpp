// The wire layout of the MAD headers and attributes: each one's encoding against bytes written
// by hand from the InfiniBand specification's tables (bit offsets and widths), decoding back,
// the checks on bad input, the field-by-field print, and a PathRecord applied to QP settings.
#include "rdmacxx/mad/attributes.hpp"
#include "rdmacxx/mad/packet.hpp"
#include "rdmacxx/mad/sa.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace rx = rdmacxx;
namespace mad = rdmacxx::mad;

namespace {
// "0103 0201 …" → bytes (spaces ignored).
std::vector<std::byte> hex_bytes(std::string_view text) {
    std::vector<std::byte> out;
    auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    for (std::size_t i = 0; i < text.size();) {
        if (text[i] == ' ') {
            ++i;
            continue;
        }
        out.push_back(static_cast<std::byte>(nibble(text[i]) * 16 + nibble(text[i + 1])));
        i += 2;
    }
    return out;
}

template <class A>
std::vector<std::byte> encoded(A const& a) {
    auto const arr = mad::encode(a);
    return {arr.begin(), arr.end()};
}
} // namespace

TEST_CASE("MAD common header: 24 bytes, Method with its R bit, TransactionID big-endian") {
    mad::mad_header h;
    h.mgmt_class = mad::mgmt_class::subn_adm;
    h.class_version = 2;
    h.method = mad::method::get_resp;
    h.status = 0x0300;
    h.transaction_id = 0x0102030405060708;
    h.attribute_id = mad::attribute_id::path_record;
    h.attribute_modifier = 0xdeadbeef;
    auto const want = hex_bytes("01030281 03000000 01020304 05060708 00350000 deadbeef");
    CHECK(encoded(h) == want);
    CHECK(mad::decode<mad::mad_header>(want) == h);
    CHECK(h.is_response());
    CHECK_FALSE(mad::mad_header{}.is_response());
}

TEST_CASE("RMPP header: RRespTime (5 bits) and RMPPFlags (3 bits) share byte 2") {
    mad::rmpp_header r;
    r.rmpp_version = 1;
    r.rmpp_type = 1;
    r.r_resp_time = 3;
    r.rmpp_flags = 1;
    r.data1 = 1;
    r.data2 = 0x20;
    auto const want = hex_bytes("01011900 00000001 00000020");
    CHECK(encoded(r) == want);
    CHECK(mad::decode<mad::rmpp_header>(want) == r);
    r.r_resp_time = 0x1f;
    r.rmpp_flags = 7;
    CHECK(encoded(r)[2] == std::byte{0xff});
}

TEST_CASE("SA header: SM_Key, AttributeOffset, Reserved, ComponentMask") {
    mad::sa_header s;
    s.sm_key = 0x1122334455667788;
    s.attribute_offset = 8;
    s.component_mask = mad::path_record::component_dgid | mad::path_record::component_sgid;
    auto const want = hex_bytes("11223344 55667788 00080000 00000000 0000000c");
    CHECK(encoded(s) == want);
    CHECK(mad::decode<mad::sa_header>(want) == s);
}

TEST_CASE("ClassPortInfo: 72 bytes, CapabilityMask2 and RespTimeValue in one word, TC/SL/FL in another") {
    mad::class_port_info c;
    c.class_version = 2;
    c.capability_mask = 0x0600;
    c.capability_mask2 = 1;
    c.resp_time_value = 18;
    c.redirect_gid = rx::gid::parse("fe80::1");
    c.redirect_tc = 0xa0;
    c.redirect_sl = 5;
    c.redirect_fl = 0x12345;
    c.redirect_lid = 1;
    c.redirect_p_key = 0xffff;
    c.redirect_qp = 1;
    c.redirect_q_key = 0x80010000;
    c.trap_gid = rx::gid::parse("::ffff:198.18.0.1");
    c.trap_sl = 0xf;
    c.trap_fl = 0xfffff;
    c.trap_lid = 0xab;
    c.trap_p_key = 0x7fff;
    c.trap_hl = 64;
    c.trap_qp = 0x123456;
    c.trap_q_key = 0x11111111;
    auto const want = hex_bytes("01020600 00000032"                     // versions, masks, RespTimeValue
                                "fe800000 00000000 00000000 00000001"   // RedirectGID
                                "a0512345 0001ffff 00000001 80010000"   // TC SL FL, LID P_Key, QP, Q_Key
                                "00000000 00000000 0000ffff c6120001"   // TrapGID
                                "00ffffff 00ab7fff 40123456 11111111"); // TC SL FL, LID P_Key, HL QP, Q_Key
    REQUIRE(want.size() == mad::class_port_info::size);
    CHECK(encoded(c) == want);
    CHECK(mad::decode<mad::class_port_info>(want) == c);
}

TEST_CASE("PathRecord: 64 bytes, the bit fields of bytes 44 to 57") {
    mad::path_record p;
    p.service_id = 0x1000000000000001;
    p.dgid = rx::gid::parse("fe80::2");
    p.sgid = rx::gid::parse("fe80::1");
    p.dlid = 0x0002;
    p.slid = 0x0001;
    p.raw_traffic = 1;
    p.flow_label = 0xabcde;
    p.hop_limit = 64;
    p.t_class = 0x10;
    p.reversible = 1;
    p.num_path = 1;
    p.p_key = 0xffff;
    p.qos_class = 0xabc;
    p.sl = 3;
    p.mtu_selector = 2;
    p.mtu = 3;
    p.rate_selector = 2;
    p.rate = 6;
    p.packet_life_time_selector = 3;
    p.packet_life_time = 18;
    auto const want = hex_bytes("10000000 00000001"                   // ServiceID
                                "fe800000 00000000 00000000 00000002" // DGID
                                "fe800000 00000000 00000000 00000001" // SGID
                                "00020001"                            // DLID, SLID
                                "8abcde40"                            // RawTraffic, Reserved, FlowLabel, HopLimit
                                "1081ffff"                            // TClass, Reversible NumbPath, P_Key
                                "abc38386"                            // QosClass SL, MtuSelector MTU, RateSelector Rate
                                "d2000000 00000000");                 // PacketLifeTime…, Preference, Reserved
    REQUIRE(want.size() == mad::path_record::size);
    CHECK(encoded(p) == want);
    CHECK(mad::decode<mad::path_record>(want) == p);
}

TEST_CASE("PortCounters: 44 bytes, the two 4-bit counters share byte 19") {
    mad::port_counters c;
    c.port_select = 1;
    c.counter_select = 0xffff;
    c.symbol_error_counter = 0x0102;
    c.link_error_recovery_counter = 3;
    c.link_downed_counter = 4;
    c.port_rcv_errors = 0x0506;
    c.port_rcv_remote_physical_errors = 0x0708;
    c.port_rcv_switch_relay_errors = 0x090a;
    c.port_xmit_discards = 0x0b0c;
    c.port_xmit_constraint_errors = 0x0d;
    c.port_rcv_constraint_errors = 0x0e;
    c.counter_select2 = 0x0f;
    c.local_link_integrity_errors = 0xa;
    c.excessive_buffer_overrun_errors = 0xb;
    c.vl15_dropped = 0x1011;
    c.port_xmit_data = 0x12131415;
    c.port_rcv_data = 0x16171819;
    c.port_xmit_pkts = 0x1a1b1c1d;
    c.port_rcv_pkts = 0x1e1f2021;
    c.port_xmit_wait = 0x22232425;
    auto const want = hex_bytes("0001ffff 01020304 05060708 090a0b0c 0d0e0fab 00001011"
                                "12131415 16171819 1a1b1c1d 1e1f2021 22232425");
    REQUIRE(want.size() == mad::port_counters::size);
    CHECK(encoded(c) == want);
    CHECK(mad::decode<mad::port_counters>(want) == c);
}

TEST_CASE("encode refuses a value wider than its field, naming it, and writes nothing") {
    mad::path_record p;
    p.sl = 16;
    std::array<std::byte, mad::path_record::size> out{};
    out.fill(std::byte{0x5a});
    CHECK_THROWS_WITH_AS(mad::encode(p, std::span<std::byte>{out}),
                         "PathRecord.SL = 16 does not fit in its 4 bits (Invalid argument)", rx::argument_error);
    CHECK(out[0] == std::byte{0x5a});
    mad::class_port_info c;
    c.redirect_qp = 0x1000000;
    CHECK_THROWS_WITH_AS((void)mad::encode(c),
                         "ClassPortInfo.RedirectQP = 16777216 does not fit in its 24 bits (Invalid argument)",
                         rx::argument_error);
}

TEST_CASE("encode and decode refuse buffers shorter than the layout") {
    std::array<std::byte, 10> small{};
    CHECK_THROWS_WITH_AS((void)mad::decode<mad::path_record>(small),
                         "cannot decode PathRecord from 10 bytes: it takes 64 (Invalid argument)", rx::argument_error);
    CHECK_THROWS_WITH_AS(mad::encode(mad::port_counters{}, std::span<std::byte>{small}),
                         "cannot encode PortCounters into 10 bytes: it takes 44 (Invalid argument)",
                         rx::argument_error);
}

TEST_CASE("encode leaves the bytes around a sub-byte field alone when writing into a larger buffer") {
    std::array<std::byte, 80> buf{};
    buf.fill(std::byte{0xff});
    mad::sa_header s;
    mad::encode(s, std::span<std::byte>{buf});
    CHECK(buf[19] == std::byte{0});
    CHECK(buf[20] == std::byte{0xff});
}

TEST_CASE("print shows each field by its specification name, in wire order") {
    mad::path_record p;
    p.dgid = rx::gid::parse("fe80::2");
    p.sl = 3;
    p.p_key = 0xffff;
    std::ostringstream os;
    mad::print(os, p, "  ");
    std::string const s = os.str();
    CHECK(s.find("  ServiceID: 0x0\n  DGID: fe80::2\n  SGID: ::\n") == 0);
    CHECK(s.find("  P_Key: 0xffff\n") != std::string::npos);
    CHECK(s.find("  SL: 3\n") != std::string::npos);
    CHECK(s.find("  SL: 3\n") > s.find("  P_Key: 0xffff\n"));
}

TEST_CASE("print_hex writes 16 bytes to a line, as 32-bit words, after the offset") {
    auto const b = hex_bytes("01020304 05060708 090a0b0c 0d0e0f10 11121314 15");
    std::ostringstream os;
    mad::print_hex(os, b, "> ");
    CHECK(os.str() == ">   0 01020304 05060708 090a0b0c 0d0e0f10\n>  16 11121314 15\n");
}

TEST_CASE("packet: the header, the SA headers and the attribute at the class's data offset") {
    CHECK(mad::data_offset(mad::mgmt_class::subn_adm) == 56);
    CHECK(mad::data_offset(mad::mgmt_class::perf_mgt) == 64);
    CHECK(mad::data_offset(0x32) == 40);
    CHECK(mad::data_offset(0x09) == 24);

    mad::packet p;
    mad::mad_header h;
    h.mgmt_class = mad::mgmt_class::subn_adm;
    h.class_version = 2;
    h.method = mad::method::get;
    h.transaction_id = 7;
    h.attribute_id = mad::path_record::id;
    p.set_header(h);
    mad::sa_header sa;
    sa.component_mask = mad::path_record::component_dgid;
    p.set_sa_header(sa);
    mad::path_record pr;
    pr.dgid = rx::gid::parse("fe80::2");
    p.set_attribute(pr);

    CHECK(p.header() == h);
    CHECK(p.sa_header() == sa);
    CHECK(p.attribute<mad::path_record>() == pr);
    CHECK(p.bytes()[56 + 8] == std::byte{0xfe}); // DGID at byte 8 of the record, 56 + 8 of the MAD
    CHECK(p.bytes()[36 + 19] == std::byte{0x04});
    CHECK(mad::describe(h) == "MAD_METHOD_GET(1) SubnAdm(3.2) SAPathRecord(53)");

    mad::packet copy{p.bytes()};
    CHECK(copy == p);
    std::array<std::byte, 300> big{};
    CHECK_THROWS_AS(mad::packet{big}, rx::argument_error);
}

TEST_CASE("packet: the OUI of a vendor MAD of range 2, bytes 37 to 39") {
    mad::packet p;
    mad::mad_header h;
    h.mgmt_class = 0x32;
    p.set_header(h);
    p.set_oui(0x001405);
    CHECK(p.bytes()[37] == std::byte{0x00});
    CHECK(p.bytes()[38] == std::byte{0x14});
    CHECK(p.bytes()[39] == std::byte{0x05});
    CHECK(p.oui() == 0x001405);
    CHECK(p.data().size() == 256 - 40);
    CHECK_THROWS_AS(p.set_oui(0x1000000), rx::argument_error);
}

TEST_CASE("print_packet decodes the header, the SA headers and a PathRecord, then the bytes") {
    mad::packet p;
    mad::mad_header h;
    h.mgmt_class = mad::mgmt_class::subn_adm;
    h.class_version = 2;
    h.method = mad::method::get_resp;
    h.status = 0x0300;
    h.attribute_id = mad::path_record::id;
    p.set_header(h);
    std::ostringstream os;
    mad::print_packet(os, p, "E:   ");
    std::string const s = os.str();
    CHECK(s.find("E:   MADHeader MAD_METHOD_GET_RESP(129) SubnAdm(3.2) SAPathRecord(53)\n") == 0);
    CHECK(s.find("E:     Status: 0x300\n") != std::string::npos);
    CHECK(s.find("E:     (Status: class-specific status 3)\n") != std::string::npos);
    CHECK(s.find("E:   SAHeader\n") != std::string::npos);
    CHECK(s.find("E:   PathRecord\n") != std::string::npos);
    CHECK(s.find("E:   bytes (256)\nE:       0 01030281 03000000 00000000 00000000\n") != std::string::npos);
}

TEST_CASE("names of classes, methods and statuses as messages print them") {
    CHECK(mad::class_name(mad::mgmt_class::perf_mgt) == "PerfMgt");
    CHECK(mad::class_name(0x32) == "class 0x32 (vendor, OUI)");
    CHECK(mad::method_name(mad::method::get) == "MAD_METHOD_GET(1)");
    CHECK(mad::method_name(0x2a) == "method 42");
    CHECK(mad::status_text(0x000c) == "the method/attribute combination is not supported");
    CHECK(mad::status_text(0x0001) == "busy");
    CHECK(mad::status_text(0x0300) == "class-specific status 3");
    CHECK(mad::sa_status_name(mad::sa_status::no_records) == "ERR_NO_RECORDS");
    CHECK(mad::attribute_name(mad::mgmt_class::perf_mgt, 0x12) == "PMPortCounters");
    CHECK(mad::attribute_name(mad::mgmt_class::perf_mgt, 0x1234) == "attribute 0x1234");
}

TEST_CASE("apply: a PathRecord's MTU, SL, hop limit, traffic class and flow label go into qp_settings") {
    mad::path_record p;
    p.mtu = 5;
    p.sl = 3;
    p.hop_limit = 2;
    p.t_class = 0x10;
    p.flow_label = 0xabcde;
    rx::qp_settings s;
    s.qkey = 7;
    mad::apply(p, s);
    CHECK(s.path_mtu == IBV_MTU_4096);
    CHECK(s.service_level == 3);
    CHECK(s.hop_limit == 2);
    CHECK(s.traffic_class == 0x10);
    CHECK(s.flow_label == 0xabcde);
    CHECK(s.qkey == 7);
    p.mtu = 0;
    rx::qp_settings untouched;
    CHECK_THROWS_WITH_AS(mad::apply(p, untouched), "PathRecord.MTU = 0 is no path MTU (1 … 5) (Invalid argument)",
                         rx::argument_error);
    CHECK_FALSE(untouched.path_mtu);
}
