#include "rdmacxx/error.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <string>

namespace rx = rdmacxx;

TEST_CASE("sys_error names the verb and carries errno in the system category") {
    rx::sys_error e(EINVAL, "ibv_modify_qp", "moving RC QP 7 from INIT to RTR");
    CHECK(e.code() == std::error_code(EINVAL, std::system_category()));
    CHECK(e.code() == std::errc::invalid_argument);
    CHECK(e.verb() == "ibv_modify_qp");
    CHECK(std::string{e.what()} == "ibv_modify_qp failed moving RC QP 7 from INIT to RTR (Invalid argument)");
}

TEST_CASE("context messages stack, top layer first in what()") {
    rx::sys_error e(ENOENT, "ibv_open_device", "for device nosuch0");
    e.push_context("opening end port nosuch0/1").push_context("starting the server");
    REQUIRE(e.messages().size() == 3);
    CHECK(e.messages()[0] == "ibv_open_device failed for device nosuch0");
    CHECK(std::string{e.what()} ==
          "starting the server: opening end port nosuch0/1: ibv_open_device failed for device nosuch0 "
          "(No such file or directory)");
}

TEST_CASE("dump_detailed prints levels 0, 1 and 2 in python-rdma's shape") {
    rx::sys_error e(EINVAL, "ibv_modify_qp", "moving RC QP 7 from INIT to RTR");
    e.push_context("Failed connecting QP 7 to QPN 9");
    std::ostringstream l0, l1, l2;
    e.dump_detailed(l0, "E:", 0);
    e.dump_detailed(l1, "E:", 1);
    e.dump_detailed(l2, "E:", 2);
    CHECK(l0.str() == "E: Failed connecting QP 7 to QPN 9\n");
    CHECK(l1.str() == "E: Failed connecting QP 7 to QPN 9\n"
                      "E: +ibv_modify_qp failed moving RC QP 7 from INIT to RTR\n"
                      "E: +system 22: Invalid argument\n");
    CHECK(l2.str() == l1.str() + "E:   verb: ibv_modify_qp\nE:   errno: 22\n");
}

TEST_CASE("wc_error carries the completion status as an error_code and dumps the completion") {
    ibv_wc wc{};
    wc.wr_id = 42;
    wc.status = IBV_WC_REM_ACCESS_ERR;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.vendor_err = 0x13;
    wc.qp_num = 17;
    rx::wc_error e(wc, true);
    CHECK(e.code() == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
    CHECK(e.code().category() == rx::wc_category());
    CHECK(e.code().message() == ::ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
    CHECK(e.status() == IBV_WC_REM_ACCESS_ERR);
    CHECK(e.is_send());
    std::ostringstream os;
    e.dump_detailed(os, "E:", 2);
    CHECK(os.str() == "E: work completion for wr_id 42 on QP 17 (send queue)\n"
                      "E: +rdmacxx.wc_status 10: remote access error\n"
                      "E:   status: remote access error (10)\n"
                      "E:   vendor_err: 0x13\n"
                      "E:   opcode: 1\n"
                      "E:   wr_id: 42\n"
                      "E:   qp_num: 17\n"
                      "E:   side: send\n"
                      "E:   byte_len: 0\n");
}

TEST_CASE("wr_error reports the bad index of the chain") {
    rx::wr_error e(ENOMEM, "ibv_post_send", 3, 99, IBV_WR_RDMA_WRITE, 5);
    CHECK(e.bad_index() == 3);
    CHECK(e.wr_id() == 99);
    CHECK(e.code() == std::errc::not_enough_memory);
    CHECK(std::string{e.what()}.find("work request 3 of its chain on QP 5") != std::string::npos);
    std::ostringstream os;
    e.dump_detailed(os, "", 2);
    CHECK(os.str().find("  bad_index: 3\n") != std::string::npos);
}

TEST_CASE("every rdmacxx error is caught as the root and as std::system_error") {
    auto thrower = [] { throw rx::argument_error("bad span"); };
    CHECK_THROWS_AS(thrower(), rx::error);
    CHECK_THROWS_AS(thrower(), std::system_error);
}
