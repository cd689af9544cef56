#include "rdmacxx/error.hpp"

#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>
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

TEST_CASE("wc_error carries the completion status as an error_code and dumps only what a failed completion defines") {
    ibv_wc wc{};
    std::memset(&wc, 0xa5, sizeof wc); // what a provider leaves undefined in a failed completion
    wc.wr_id = 42;
    wc.status = IBV_WC_REM_ACCESS_ERR;
    wc.vendor_err = 0x13;
    wc.qp_num = 17;
    rx::wc_error const e(wc);
    CHECK(e.code() == rx::make_wc_error_code(IBV_WC_REM_ACCESS_ERR));
    CHECK(e.code().category() == rx::wc_category());
    CHECK(e.code().message() == ::ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
    CHECK(e.status() == IBV_WC_REM_ACCESS_ERR);
    CHECK(e.side() == rx::completion_side::unknown);
    CHECK(e.request().opcode == -2);
    std::ostringstream os;
    e.dump_detailed(os, "E:", 2);
    // Neither the opcode, nor the length, nor a side guessed from the opcode's receive bit.
    CHECK(os.str() == "E: work completion for wr_id 42 on QP 17\n"
                      "E: +rdmacxx.wc_status 10: remote access error\n"
                      "E:   status: remote access error (10)\n"
                      "E:   vendor_err: 0x13\n"
                      "E:   wr_id: 42\n"
                      "E:   qp_num: 17\n"
                      "E:   side: unknown (not tracked)\n");
}

TEST_CASE("wc_error names the tracked request: side, operation, remote address and rkey in hex") {
    ibv_wc wc{};
    wc.wr_id = 7;
    wc.status = IBV_WC_REM_ACCESS_ERR;
    wc.qp_num = 18;
    rx::wc_error const e(wc, rx::tracked_request{rx::completion_side::send, IBV_WR_RDMA_WRITE, 0x7f0012345000, 0xab12});
    CHECK(e.side() == rx::completion_side::send);
    CHECK(e.request().remote_address == 0x7f0012345000);
    CHECK(std::string{e.what()} == "work completion for wr_id 7 on QP 18 (send queue): RDMA WRITE of remote address "
                                   "0x7f0012345000 with rkey 0xab12 (remote access error)");
    std::ostringstream os;
    e.dump_detailed(os, "", 2);
    CHECK(os.str().find("  side: send\n  operation: RDMA WRITE\n  remote_address: 0x7f0012345000\n  rkey: 0xab12\n") !=
          std::string::npos);

    rx::wc_error const r(wc, rx::tracked_request{rx::completion_side::receive, -1, 0, 0});
    CHECK(std::string{r.what()}.find("(receive queue): RECV (") != std::string::npos);
    std::ostringstream ro;
    r.dump_detailed(ro, "", 2);
    CHECK(ro.str().find("remote_address") == std::string::npos);

    rx::wc_error const k(wc, false); // the thrower knows the queue
    CHECK(k.side() == rx::completion_side::receive);
}

TEST_CASE("throw_errno reads errno before it builds its message") {
    errno = EACCES;
    try {
        rx::detail::throw_errno("ibv_reg_mr", [] {
            errno = ENOMEM; // what an allocation or a verb called while building the message may do
            return std::string{"registering 4096 bytes"};
        });
    } catch (rx::sys_error const& e) {
        CHECK(e.errno_value() == EACCES);
        CHECK(std::string{e.what()} == "ibv_reg_mr failed registering 4096 bytes (Permission denied)");
    }
    errno = 0;
    CHECK_THROWS_WITH_AS(rx::detail::throw_errno("fcntl", "setting O_NONBLOCK"),
                         "fcntl failed setting O_NONBLOCK (Input/output error)", rx::sys_error);
}

TEST_CASE("ibv_poll_cq's negative return is EIO, its value quoted, never read as an errno") {
    // mlx5 returns -2 for any failure: as an errno that would read "No such file or directory".
    CHECK_THROWS_WITH_AS(rx::detail::throw_poll_cq(-2), "ibv_poll_cq failed (it returned -2) (Input/output error)",
                         rx::sys_error);
    CHECK(rx::detail::poll_cq_error_code(-2) == std::errc::io_error);
    CHECK(rx::detail::poll_cq_error_code(-22) == std::errc::io_error);
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

TEST_CASE("throw_verb: the errno values that mean \"not supported\" are not_supported_error, in one place") {
    for (int err : {EOPNOTSUPP, ENOTSUP, ENOSYS, EPROTONOSUPPORT}) {
        CAPTURE(err);
        CHECK_THROWS_AS(rx::detail::throw_verb(err, "ibv_alloc_td", "on rxe0: thread domains"),
                        rx::not_supported_error);
    }
    // A not_supported_error is a sys_error with its verb and errno.
    try {
        rx::detail::throw_verb(EOPNOTSUPP, "ibv_alloc_td", "on rxe0: thread domains");
    } catch (rx::sys_error const& e) {
        CHECK(e.verb() == "ibv_alloc_td");
        CHECK(e.errno_value() == EOPNOTSUPP);
        CHECK(std::string{e.what()}.find("ibv_alloc_td failed on rxe0: thread domains") == 0);
    }
    // EINVAL is a bad argument unless the verb's manual says it also means "not supported".
    auto const einval = [](rx::detail::einval_means m) { rx::detail::throw_verb(EINVAL, "ibv_reg_mr", "", m); };
    CHECK_THROWS_AS(einval(rx::detail::einval_means::not_supported), rx::not_supported_error);
    try {
        einval(rx::detail::einval_means::bad_argument);
    } catch (rx::not_supported_error const&) {
        FAIL("EINVAL read as not supported");
    } catch (rx::sys_error const& e) {
        CHECK(e.errno_value() == EINVAL);
    }
    CHECK_FALSE(rx::detail::means_not_supported(ENOMEM));
}
