#include "rdmacxx/wr.hpp"

#include "rdmacxx/memory_window.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace rx = rdmacxx;

// Compile-time legality: what each transport may post.
static_assert(rx::postable_on<rx::send<>, rx::rc> && rx::postable_on<rx::send<>, rx::uc> &&
              rx::postable_on<rx::send<>, rx::ud>);
static_assert(rx::postable_on<rx::send_imm<>, rx::ud>);
static_assert(rx::postable_on<rx::write<>, rx::rc> && rx::postable_on<rx::write<>, rx::uc>);
static_assert(!rx::postable_on<rx::write<>, rx::ud> && !rx::postable_on<rx::write_imm<>, rx::ud>);
static_assert(rx::postable_on<rx::read<>, rx::rc> && !rx::postable_on<rx::read<>, rx::uc> &&
              !rx::postable_on<rx::read<>, rx::ud>);
static_assert(rx::postable_on<rx::compare_swap, rx::rc> && !rx::postable_on<rx::compare_swap, rx::uc>);
static_assert(rx::postable_on<rx::fetch_add, rx::rc> && !rx::postable_on<rx::fetch_add, rx::ud>);
static_assert(!rx::postable_on<rx::recv<>, rx::rc>);
static_assert(rx::recv_work_request<rx::recv<>> && !rx::recv_work_request<rx::send<>>);

// An operation carries its legality as a set of transports; a transport its operation set.
static_assert(rx::write<>::transports == rx::transport_set::of<rx::rc, rx::uc>());
static_assert(rx::transport_set::of<rx::rc>().has<rx::rc>() && !rx::transport_set::of<rx::rc>().has<rx::ud>());
static_assert(rx::postable_on<rx::bind_mw, rx::rc> && !rx::postable_on<rx::bind_mw, rx::uc> &&
              !rx::postable_on<rx::bind_mw, rx::ud>);
static_assert(rx::postable_on<rx::local_invalidate, rx::rc> && !rx::postable_on<rx::local_invalidate, rx::ud>);
static_assert(rx::postable_on<rx::send_inv<>, rx::rc> && !rx::postable_on<rx::send_inv<>, rx::ud>);

// Every operation a transport may carry is in the operation set its extended QPs announce, and
// no transport announces an operation it may not carry.
template <class Transport, class... Ops>
constexpr bool sets_agree() {
    std::uint64_t announced = 0;
    bool ok = true;
    ((Ops::transports.template has<Transport>()
          ? (ok = ok && (Transport::send_ops & Ops::send_op) != 0, announced |= Ops::send_op)
          : 0),
     ...);
    return ok && announced == Transport::send_ops;
}
template <class Transport>
constexpr bool
    agrees = sets_agree<Transport, rx::send<>, rx::send_imm<>, rx::write<>, rx::write_imm<>, rx::read<>,
                        rx::compare_swap, rx::fetch_add, rx::bind_mw, rx::local_invalidate, rx::send_inv<>>();
static_assert(agrees<rx::rc> && agrees<rx::uc> && agrees<rx::ud>);

// A gathered list knows whether the HCA may write all of it: any span of const makes it read-only,
// and it still converts into the sends and writes (tests/compile_fail has the READs and receives).
static_assert(
    std::is_same_v<decltype(rx::gather(std::declval<rx::local_span<int>>(), std::declval<rx::local_span<char>>())),
                   rx::sg_list<2, true>>);
static_assert(std::is_same_v<decltype(rx::gather(std::declval<rx::local_span<int>>(),
                                                 std::declval<rx::local_span<char const>>())),
                             rx::sg_list<2, false>>);
static_assert(std::is_same_v<decltype(rx::send{std::declval<rx::sg_list<2, false>>()}), rx::send<2>>);
static_assert(
    std::is_same_v<decltype(rx::write{std::declval<rx::sg_list<3, false>>(), std::declval<rx::remote_span<int>>()}),
                   rx::write<3>>);

namespace {

std::array<std::byte, 256> local_memory{};
std::array<std::uint64_t, 4> atomic_result{};

rx::local_span<std::byte> local(std::size_t off, std::size_t n) {
    return rx::local_span<std::byte>::assume_registered(local_memory.data() + off, n, 0x1111);
}

// What a careful C programmer writes, starting from a zeroed request.
ibv_send_wr raw(std::uint64_t wr_id, ibv_wr_opcode op, unsigned flags, ibv_sge* sge, int num_sge) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = sge;
    wr.num_sge = num_sge;
    wr.opcode = op;
    wr.send_flags = flags;
    return wr;
}

// Compares what a provider reads for the request's opcode (rxe's convert_send_wr and
// init_send_wqe: the common fields, imm_data and the XRC SRQ number for every opcode, the `wr`
// union's member of the operation, and wr.rdma.remote_addr for every non-atomic one).
void check_same(ibv_send_wr const& built, ibv_send_wr const& expected) {
    CHECK(built.wr_id == expected.wr_id);
    CHECK(built.next == expected.next);
    CHECK(built.num_sge == expected.num_sge);
    for (int i = 0; i < expected.num_sge; ++i) {
        CAPTURE(i);
        CHECK(built.sg_list[i].addr == expected.sg_list[i].addr);
        CHECK(built.sg_list[i].length == expected.sg_list[i].length);
        CHECK(built.sg_list[i].lkey == expected.sg_list[i].lkey);
    }
    CHECK(built.opcode == expected.opcode);
    CHECK(built.send_flags == expected.send_flags);
    CHECK(built.imm_data == expected.imm_data);
    CHECK(built.qp_type.xrc.remote_srqn == expected.qp_type.xrc.remote_srqn);
    if (expected.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || expected.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        CHECK(built.wr.atomic.remote_addr == expected.wr.atomic.remote_addr);
        CHECK(built.wr.atomic.rkey == expected.wr.atomic.rkey);
        CHECK(built.wr.atomic.compare_add == expected.wr.atomic.compare_add);
        CHECK(built.wr.atomic.swap == expected.wr.atomic.swap);
    } else if ((expected.opcode == IBV_WR_SEND || expected.opcode == IBV_WR_SEND_WITH_IMM) &&
               expected.wr.ud.ah != nullptr) { // a UD send
        CHECK(built.wr.ud.ah == expected.wr.ud.ah);
        CHECK(built.wr.ud.remote_qpn == expected.wr.ud.remote_qpn);
        CHECK(built.wr.ud.remote_qkey == expected.wr.ud.remote_qkey);
    } else {
        CHECK(built.wr.rdma.remote_addr == expected.wr.rdma.remote_addr);
        CHECK(built.wr.rdma.rkey == expected.wr.rdma.rkey);
    }
}

// Builds `w` into a request full of garbage, as the post path's uninitialised chain is: build()
// must set every field a provider reads (`next` is the poster's).
template <class Transport, class W>
ibv_send_wr build(W const& w) {
    ibv_send_wr wr;
    std::memset(&wr, 0xa5, sizeof wr);
    w.template build<Transport>(wr);
    wr.next = nullptr;
    return wr;
}

} // namespace

TEST_CASE("send builds the request a C programmer would") {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(local_memory.data() + 8), 32, 0x1111};
    auto const expected = raw(7, IBV_WR_SEND, IBV_SEND_SIGNALED, &sge, 1);
    check_same(build<rx::rc>(rx::send{local(8, 32)}.id(7)), expected);

    auto const unsignaled_inline = raw(8, IBV_WR_SEND, IBV_SEND_INLINE | IBV_SEND_SOLICITED, &sge, 1);
    check_same(build<rx::uc>(rx::send{local(8, 32)}.id(8).unsignaled().inlined().solicited()), unsignaled_inline);
}

TEST_CASE("UD send carries its address handle, remote QPN and Q_Key") {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(local_memory.data()), 16, 0x1111};
    auto* const ah = reinterpret_cast<ibv_ah*>(std::uintptr_t{0x5000});
    auto expected = raw(1, IBV_WR_SEND_WITH_IMM, IBV_SEND_SIGNALED, &sge, 1);
    expected.imm_data = htonl(0xdeadbeef);
    expected.wr.ud.ah = ah;
    expected.wr.ud.remote_qpn = 0x123;
    expected.wr.ud.remote_qkey = 0x11111111;
    check_same(build<rx::ud>(rx::send_imm{local(0, 16), 0xdeadbeef}.id(1).to(ah, 0x123, 0x11111111)), expected);
}

TEST_CASE("write, write_imm and read carry the remote address and rkey") {
    rx::remote_span<std::byte> const remote{0xabc000, 4096, 0x2222};
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(local_memory.data() + 64), 128, 0x1111};

    auto w = raw(3, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED | IBV_SEND_FENCE, &sge, 1);
    w.wr.rdma.remote_addr = 0xabc000 + 100;
    w.wr.rdma.rkey = 0x2222;
    check_same(build<rx::rc>(rx::write{local(64, 128), remote.subspan(100)}.id(3).fence()), w);

    auto wi = raw(4, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SIGNALED, &sge, 1);
    wi.wr.rdma.remote_addr = 0xabc000;
    wi.wr.rdma.rkey = 0x2222;
    wi.imm_data = htonl(42);
    check_same(build<rx::uc>(rx::write_imm{local(64, 128), remote, 42}.id(4)), wi);

    auto r = raw(5, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, &sge, 1);
    r.wr.rdma.remote_addr = 0xabc000;
    r.wr.rdma.rkey = 0x2222;
    check_same(build<rx::rc>(rx::read{local(64, 128), remote}.id(5)), r);
}

TEST_CASE("one-sided requests refuse a local span longer than the remote one") {
    rx::remote_span<std::byte> const remote{0xabc000, 16, 0x2222};
    CHECK_THROWS_AS(rx::write(local(0, 17), remote), rx::argument_error);
    CHECK_THROWS_AS(rx::read(local(0, 17), remote), rx::argument_error);
    CHECK_NOTHROW(rx::write(local(0, 16), remote));
}

TEST_CASE("atomics build their compare/add and swap operands") {
    auto const result = rx::local_span<std::uint64_t>::assume_registered(atomic_result.data(), 4, 0x3333);
    rx::remote_span<std::uint64_t> const target{0x8000, 1, 0x4444};
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(atomic_result.data()), 8, 0x3333};

    auto cas = raw(9, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_SEND_SIGNALED, &sge, 1);
    cas.wr.atomic.remote_addr = 0x8000;
    cas.wr.atomic.rkey = 0x4444;
    cas.wr.atomic.compare_add = 5;
    cas.wr.atomic.swap = 6;
    check_same(build<rx::rc>(rx::compare_swap{result, target, 5, 6}.id(9)), cas);

    auto faa = raw(10, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_SEND_SIGNALED, &sge, 1);
    faa.wr.atomic.remote_addr = 0x8000;
    faa.wr.atomic.rkey = 0x4444;
    faa.wr.atomic.compare_add = 3;
    check_same(build<rx::rc>(rx::fetch_add{result, target, 3}.id(10)), faa);

    rx::remote_span<std::uint64_t> const misaligned{0x8004, 1, 0x4444};
    CHECK_THROWS_AS(rx::fetch_add(result, misaligned, 1), rx::argument_error);
    CHECK_THROWS_AS(rx::compare_swap(result.first(0), target, 1, 2), rx::argument_error);
}

TEST_CASE("gathered requests list every span in order") {
    auto const sg = rx::gather(local(0, 8), local(32, 16), local(100, 4));
    CHECK(sg.bytes == 28);
    auto const request = rx::send{sg}.id(2);
    auto const w = build<rx::rc>(request);
    REQUIRE(w.num_sge == 3);
    CHECK(w.sg_list[1].addr == reinterpret_cast<std::uintptr_t>(local_memory.data() + 32));
    CHECK(w.sg_list[2].length == 4);
}

TEST_CASE("recv builds its receive request") {
    auto const r = rx::recv{local(0, 64)}.id(77);
    ibv_recv_wr wr;
    std::memset(&wr, 0xa5, sizeof wr);
    r.build(wr);
    wr.next = nullptr; // the poster's
    CHECK(wr.wr_id == 77);
    CHECK(wr.next == nullptr);
    REQUIRE(wr.num_sge == 1);
    CHECK(wr.sg_list[0].addr == reinterpret_cast<std::uintptr_t>(local_memory.data()));
    CHECK(wr.sg_list[0].length == 64);
    CHECK(wr.sg_list[0].lkey == 0x1111);
}

TEST_CASE("a misaligned atomic target is quoted in hex") {
    auto const result = rx::local_span<std::uint64_t>::assume_registered(atomic_result.data(), 1, 0x2222);
    CHECK_THROWS_WITH_AS((rx::fetch_add{result, rx::remote_span<std::uint64_t>{0x10fc, 1, 0x3333}, 1}),
                         "atomic target address 0x10fc is not 8-byte aligned (Invalid argument)", rx::argument_error);
}

TEST_CASE("send_inv builds a SEND with invalidate naming the window's rkey") {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(local_memory.data()), 16, 0x1111};
    rx::remote_span<std::byte> const window{0xabc000, 64, 0x3344};
    auto expected = raw(5, IBV_WR_SEND_WITH_INV, IBV_SEND_SIGNALED, &sge, 1);
    expected.invalidate_rkey = 0x3344;
    rx::send_inv const w{local(0, 16), window};
    CHECK(w.invalidate_rkey() == 0x3344);
    check_same(build<rx::rc>(rx::send_inv{local(0, 16), window}.id(5)), expected);
}
