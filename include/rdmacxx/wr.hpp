#pragma once
/// @file
/// Typed work requests: `send`, `send_imm`, `write`, `write_imm`, `read`, `compare_swap`,
/// `fetch_add` for the send queue and `recv` for the receive queue (the memory-window ones are in
/// memory_window.hpp). Each operation is one type that carries the transports it is legal on and
/// both of its encodings side by side: the exact `ibv_send_wr` a careful C programmer would write
/// (ibv_post_send(3)) and the `ibv_wr_*` calls of the extended API (ibv_wr_post(3)); which
/// transport may post which is decided at compile time (`postable_on`).
/// @see ibv_post_send(3), ibv_post_recv(3), ibv_wr_post(3)

#include "rdmacxx/wr_base.hpp"

namespace rdmacxx {
inline namespace v0 {

/// SEND: the payload lands in the receive buffer the peer posted. Legal on RC, UC, UD (UD:
/// addressed with `.to(ah, qpn, qkey)`, at most one path MTU).
template <std::size_t Sges = 1>
class send : public detail::two_sided_base<send<Sges>, Sges> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_SEND; ///< its `ibv_send_wr` opcode
    static constexpr char const* name = "SEND";          ///< for messages
    /// The transports it may be posted on.
    static constexpr transport_set transports = transport_set::of<rc, uc, ud>();
    /// Its flag in ibv_create_qp_ex(3)'s `send_ops_flags` (each transport's `send_ops`).
    static constexpr std::uint64_t send_op = IBV_QP_EX_WITH_SEND;
    /// Compiles only when `Transport` is one of `transports`; otherwise says why.
    template <class Transport>
    static constexpr void require_transport() noexcept {
        static_assert(transports.template has<Transport>(), "a SEND is available on every transport");
    }
    /// A send of one span.
    template <class T>
    constexpr explicit send(local_span<T> payload) noexcept requires(Sges == 1)
        : detail::two_sided_base<send, Sges>(detail::as_sg_list(payload)) {}
    /// A send gathered from several spans.
    template <bool W>
    constexpr explicit send(sg_list<Sges, W> const& payload) noexcept
        : detail::two_sided_base<send, Sges>(detail::as_sg_list(payload)) {}
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M>
    explicit send(M const&) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// Fills `wr` for transport `Transport`: every field a provider reads for this operation
    /// (`wr_id`, `sg_list`, `num_sge`, `opcode`, `send_flags`, `imm_data`, the `wr` union's
    /// members of the operation, `qp_type`), not `next` (the caller's) and not the memory-window
    /// and TSO members (only `bind_mw` uses them). `wr` need not be zeroed first.
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        this->fill_common(wr, opcode);
        this->template fill_destination<Transport>(wr);
    }
    /// Writes it with the extended API, between ibv_wr_start(3) and ibv_wr_complete(3) (the
    /// caller has set `qpx->wr_id` and `qpx->wr_flags`).
    template <class Transport>
    void build(ibv_qp_ex* qpx) const noexcept {
        ::ibv_wr_send(qpx);
        this->template set_destination<Transport>(qpx);
        this->set_payload(qpx);
    }
};
template <class T>
send(local_span<T>) -> send<1>;
template <std::size_t N, bool W>
send(sg_list<N, W>) -> send<N>;
template <detail::unregistered_memory M>
send(M const&) -> send<1>;

/// SEND with 32-bit immediate data, delivered in the receiver's completion (host order on both
/// sides). Legal on RC, UC, UD.
template <std::size_t Sges = 1>
class send_imm : public detail::two_sided_base<send_imm<Sges>, Sges> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_SEND_WITH_IMM; ///< its `ibv_send_wr` opcode
    static constexpr char const* name = "SEND with immediate";    ///< for messages
    /// The transports it may be posted on.
    static constexpr transport_set transports = transport_set::of<rc, uc, ud>();
    /// Its flag in ibv_create_qp_ex(3)'s `send_ops_flags` (each transport's `send_ops`).
    static constexpr std::uint64_t send_op = IBV_QP_EX_WITH_SEND_WITH_IMM;
    /// Compiles only when `Transport` is one of `transports`; otherwise says why.
    template <class Transport>
    static constexpr void require_transport() noexcept {
        static_assert(transports.template has<Transport>(), "a SEND with immediate is available on every transport");
    }
    /// A send of one span with immediate data `imm` (host order).
    template <class T>
    constexpr send_imm(local_span<T> payload, std::uint32_t imm) noexcept requires(Sges == 1)
        : detail::two_sided_base<send_imm, Sges>(detail::as_sg_list(payload)), imm_(imm) {}
    /// A gathered send with immediate data `imm` (host order).
    template <bool W>
    constexpr send_imm(sg_list<Sges, W> const& payload, std::uint32_t imm) noexcept
        : detail::two_sided_base<send_imm, Sges>(detail::as_sg_list(payload)), imm_(imm) {}
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M>
    send_imm(M const&, std::uint32_t) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// The immediate data, host order.
    [[nodiscard]] constexpr std::uint32_t imm() const noexcept { return imm_; }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        this->fill_common(wr, opcode);
        wr.imm_data = htonl(imm_);
        this->template fill_destination<Transport>(wr);
    }
    /// Writes it with the extended API, between ibv_wr_start(3) and ibv_wr_complete(3) (the
    /// caller has set `qpx->wr_id` and `qpx->wr_flags`).
    template <class Transport>
    void build(ibv_qp_ex* qpx) const noexcept {
        ::ibv_wr_send_imm(qpx, htonl(imm_));
        this->template set_destination<Transport>(qpx);
        this->set_payload(qpx);
    }

private:
    std::uint32_t imm_ = 0;
};
template <class T>
send_imm(local_span<T>, std::uint32_t) -> send_imm<1>;
template <std::size_t N, bool W>
send_imm(sg_list<N, W>, std::uint32_t) -> send_imm<N>;
template <detail::unregistered_memory M>
send_imm(M const&, std::uint32_t) -> send_imm<1>;

/// RDMA WRITE: copies local memory into the peer's registered memory, with no receive consumed.
/// Legal on RC and UC.
template <std::size_t Sges = 1>
class write : public detail::one_sided_base<write<Sges>, Sges> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE; ///< its `ibv_send_wr` opcode
    static constexpr char const* name = "RDMA WRITE";          ///< for messages
    /// The transports it may be posted on.
    static constexpr transport_set transports = transport_set::of<rc, uc>();
    /// Its flag in ibv_create_qp_ex(3)'s `send_ops_flags` (each transport's `send_ops`).
    static constexpr std::uint64_t send_op = IBV_QP_EX_WITH_RDMA_WRITE;
    /// Compiles only when `Transport` is one of `transports`; otherwise says why.
    template <class Transport>
    static constexpr void require_transport() noexcept {
        static_assert(transports.template has<Transport>(),
                      "RDMA WRITE is not available on UD queue pairs (use send or send_imm)");
    }
    /// Writes `source` to the start of `target`.
    /// @throws argument_error when `source` is longer than `target`.
    template <class T, class U>
    write(local_span<T> source, remote_span<U> target) requires(Sges == 1)
        : detail::one_sided_base<write, Sges>(detail::as_sg_list(source), target, name) {}
    /// Writes the gathered `source` to the start of `target`.
    /// @throws argument_error when `source` is longer than `target`.
    template <bool W, class U>
    write(sg_list<Sges, W> const& source, remote_span<U> target)
        : detail::one_sided_base<write, Sges>(detail::as_sg_list(source), target, name) {}
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M, class U>
    write(M const&, remote_span<U>) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        this->fill_common(wr, opcode);
        this->fill_rdma(wr);
    }
    /// Writes it with the extended API, between ibv_wr_start(3) and ibv_wr_complete(3) (the
    /// caller has set `qpx->wr_id` and `qpx->wr_flags`).
    template <class Transport>
    void build(ibv_qp_ex* qpx) const noexcept {
        ::ibv_wr_rdma_write(qpx, this->rkey(), this->remote_address());
        this->set_payload(qpx);
    }
};
template <class T, class U>
write(local_span<T>, remote_span<U>) -> write<1>;
template <std::size_t N, bool W, class U>
write(sg_list<N, W>, remote_span<U>) -> write<N>;
template <detail::unregistered_memory M, class U>
write(M const&, remote_span<U>) -> write<1>;

/// RDMA WRITE with immediate: a write that also consumes a receive at the peer and completes
/// there with the immediate data (host order). Legal on RC and UC.
template <std::size_t Sges = 1>
class write_imm : public detail::one_sided_base<write_imm<Sges>, Sges> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE_WITH_IMM; ///< its `ibv_send_wr` opcode
    static constexpr char const* name = "RDMA WRITE with immediate";    ///< for messages
    /// The transports it may be posted on.
    static constexpr transport_set transports = transport_set::of<rc, uc>();
    /// Its flag in ibv_create_qp_ex(3)'s `send_ops_flags` (each transport's `send_ops`).
    static constexpr std::uint64_t send_op = IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    /// Compiles only when `Transport` is one of `transports`; otherwise says why.
    template <class Transport>
    static constexpr void require_transport() noexcept {
        static_assert(transports.template has<Transport>(),
                      "RDMA WRITE is not available on UD queue pairs (use send or send_imm)");
    }
    /// @throws argument_error when `source` is longer than `target`.
    template <class T, class U>
    write_imm(local_span<T> source, remote_span<U> target, std::uint32_t imm) requires(Sges == 1)
        : detail::one_sided_base<write_imm, Sges>(detail::as_sg_list(source), target, name), imm_(imm) {}
    /// @throws argument_error when `source` is longer than `target`.
    template <bool W, class U>
    write_imm(sg_list<Sges, W> const& source, remote_span<U> target, std::uint32_t imm)
        : detail::one_sided_base<write_imm, Sges>(detail::as_sg_list(source), target, name), imm_(imm) {}
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M, class U>
    write_imm(M const&, remote_span<U>, std::uint32_t) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// The immediate data, host order.
    [[nodiscard]] constexpr std::uint32_t imm() const noexcept { return imm_; }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        this->fill_common(wr, opcode);
        this->fill_rdma(wr);
        wr.imm_data = htonl(imm_);
    }
    /// Writes it with the extended API, between ibv_wr_start(3) and ibv_wr_complete(3) (the
    /// caller has set `qpx->wr_id` and `qpx->wr_flags`).
    template <class Transport>
    void build(ibv_qp_ex* qpx) const noexcept {
        ::ibv_wr_rdma_write_imm(qpx, this->rkey(), this->remote_address(), htonl(imm_));
        this->set_payload(qpx);
    }

private:
    std::uint32_t imm_ = 0;
};
template <class T, class U>
write_imm(local_span<T>, remote_span<U>, std::uint32_t) -> write_imm<1>;
template <std::size_t N, bool W, class U>
write_imm(sg_list<N, W>, remote_span<U>, std::uint32_t) -> write_imm<N>;
template <detail::unregistered_memory M, class U>
write_imm(M const&, remote_span<U>, std::uint32_t) -> write_imm<1>;

/// RDMA READ: copies the peer's registered memory into local memory (which needs local write
/// access). Legal on RC only.
template <std::size_t Sges = 1>
class read : public detail::one_sided_base<read<Sges>, Sges> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_RDMA_READ; ///< its `ibv_send_wr` opcode
    static constexpr char const* name = "RDMA READ";          ///< for messages
    /// The transports it may be posted on.
    static constexpr transport_set transports = transport_set::of<rc>();
    /// Its flag in ibv_create_qp_ex(3)'s `send_ops_flags` (each transport's `send_ops`).
    static constexpr std::uint64_t send_op = IBV_QP_EX_WITH_RDMA_READ;
    /// Compiles only when `Transport` is one of `transports`; otherwise says why.
    template <class Transport>
    static constexpr void require_transport() noexcept {
        static_assert(transports.template has<Transport>(),
                      "RDMA READ is available only on RC queue pairs (not on UC or UD)");
    }
    /// Reads the start of `source` into `destination`, which must be writable: a
    /// `local_span<T const>` does not compile.
    /// @throws argument_error when `destination` is longer than `source`.
    template <class T, class U>
    read(local_span<T> destination, remote_span<U> source) requires(Sges == 1)
        : detail::one_sided_base<read, Sges>(detail::as_sg_list(destination), source, name) {
        static_assert(!std::is_const_v<T>, RDMACXX_READ_INTO_CONST);
    }
    /// Reads the start of `source`, scattered into `destination`.
    /// @throws argument_error when `destination` is longer than `source`.
    template <class U>
    read(sg_list<Sges> const& destination, remote_span<U> source)
        : detail::one_sided_base<read, Sges>(destination, source, name) {}
    /// A gathered list with a span of const: does not compile, with the reason.
    template <class U>
    read(sg_list<Sges, false> const& destination, remote_span<U> source)
        : detail::one_sided_base<read, Sges>(detail::as_sg_list(destination), source, name) {
        static_assert(detail::dependent_false<U>, RDMACXX_READ_INTO_CONST);
    }
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M, class U>
    read(M const&, remote_span<U>) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        this->fill_common(wr, opcode);
        this->fill_rdma(wr);
    }
    /// Writes it with the extended API, between ibv_wr_start(3) and ibv_wr_complete(3) (the
    /// caller has set `qpx->wr_id` and `qpx->wr_flags`).
    template <class Transport>
    void build(ibv_qp_ex* qpx) const noexcept {
        ::ibv_wr_rdma_read(qpx, this->rkey(), this->remote_address());
        this->set_payload(qpx);
    }
};
template <class T, class U>
read(local_span<T>, remote_span<U>) -> read<1>;
template <std::size_t N, bool W, class U>
read(sg_list<N, W>, remote_span<U>) -> read<N>;
template <detail::unregistered_memory M, class U>
read(M const&, remote_span<U>) -> read<1>;

/// 64-bit atomic compare-and-swap on the peer: if `*target == compare` then `*target = swap`;
/// the old value lands in `result[0]`. Legal on RC only.
class compare_swap : public detail::atomic_base<compare_swap> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_ATOMIC_CMP_AND_SWP; ///< its `ibv_send_wr` opcode
    static constexpr char const* name = "atomic compare-and-swap";     ///< for messages
    /// The transports it may be posted on.
    static constexpr transport_set transports = transport_set::of<rc>();
    /// Its flag in ibv_create_qp_ex(3)'s `send_ops_flags` (each transport's `send_ops`).
    static constexpr std::uint64_t send_op = IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
    /// Compiles only when `Transport` is one of `transports`; otherwise says why.
    template <class Transport>
    static constexpr void require_transport() noexcept {
        static_assert(transports.template has<Transport>(),
                      "atomic operations (compare-and-swap, fetch-and-add) are available only on RC queue pairs");
    }
    /// @throws argument_error when either span is empty or `target` is not 8-byte aligned.
    compare_swap(local_span<std::uint64_t> result, remote_span<std::uint64_t> target, std::uint64_t compare,
                 std::uint64_t swap)
        : atomic_base(result, target), compare_(compare), swap_(swap) {}
    /// A result span of const: does not compile, with the reason.
    template <class T>
        requires std::is_const_v<T> compare_swap(local_span<T>, remote_span<std::uint64_t>, std::uint64_t,
                                                 std::uint64_t) {
            static_assert(detail::dependent_false<T>, RDMACXX_ATOMIC_RESULT_CONST);
        }
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M>
    compare_swap(M const&, remote_span<std::uint64_t>, std::uint64_t, std::uint64_t) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// The value the target is compared with.
    [[nodiscard]] constexpr std::uint64_t compare() const noexcept { return compare_; }
    /// The value stored when the comparison holds.
    [[nodiscard]] constexpr std::uint64_t swap() const noexcept { return swap_; }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        fill_common(wr, opcode);
        fill_atomic(wr, compare_, swap_);
    }
    /// Writes it with the extended API, between ibv_wr_start(3) and ibv_wr_complete(3) (the
    /// caller has set `qpx->wr_id` and `qpx->wr_flags`).
    template <class Transport>
    void build(ibv_qp_ex* qpx) const noexcept {
        ::ibv_wr_atomic_cmp_swp(qpx, rkey(), remote_address(), compare_, swap_);
        this->set_payload(qpx);
    }

private:
    std::uint64_t compare_ = 0;
    std::uint64_t swap_ = 0;
};

/// 64-bit atomic fetch-and-add on the peer: `*target += add`; the old value lands in
/// `result[0]`. Legal on RC only.
class fetch_add : public detail::atomic_base<fetch_add> {
public:
    static constexpr ibv_wr_opcode opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; ///< its `ibv_send_wr` opcode
    static constexpr char const* name = "atomic fetch-and-add";          ///< for messages
    /// The transports it may be posted on.
    static constexpr transport_set transports = transport_set::of<rc>();
    /// Its flag in ibv_create_qp_ex(3)'s `send_ops_flags` (each transport's `send_ops`).
    static constexpr std::uint64_t send_op = IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    /// Compiles only when `Transport` is one of `transports`; otherwise says why.
    template <class Transport>
    static constexpr void require_transport() noexcept {
        static_assert(transports.template has<Transport>(),
                      "atomic operations (compare-and-swap, fetch-and-add) are available only on RC queue pairs");
    }
    /// @throws argument_error when either span is empty or `target` is not 8-byte aligned.
    fetch_add(local_span<std::uint64_t> result, remote_span<std::uint64_t> target, std::uint64_t add)
        : atomic_base(result, target), add_(add) {}
    /// A result span of const: does not compile, with the reason.
    template <class T>
        requires std::is_const_v<T> fetch_add(local_span<T>, remote_span<std::uint64_t>, std::uint64_t) {
            static_assert(detail::dependent_false<T>, RDMACXX_ATOMIC_RESULT_CONST);
        }
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M>
    fetch_add(M const&, remote_span<std::uint64_t>, std::uint64_t) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// The value added to the target.
    [[nodiscard]] constexpr std::uint64_t add() const noexcept { return add_; }
    template <class Transport>
    void build(ibv_send_wr& wr) const noexcept {
        fill_common(wr, opcode);
        fill_atomic(wr, add_, 0);
    }
    /// Writes it with the extended API, between ibv_wr_start(3) and ibv_wr_complete(3) (the
    /// caller has set `qpx->wr_id` and `qpx->wr_flags`).
    template <class Transport>
    void build(ibv_qp_ex* qpx) const noexcept {
        ::ibv_wr_atomic_fetch_add(qpx, rkey(), remote_address(), add_);
        this->set_payload(qpx);
    }

private:
    std::uint64_t add_ = 0;
};

/// RECV: a receive buffer for one incoming SEND or WRITE with immediate. On UD the first 40
/// bytes receive the GRH.
template <std::size_t Sges = 1>
class recv {
public:
    static constexpr std::size_t sge_count = Sges;
    static constexpr bool is_send_wr = false;
    /// A receive into one span, which must be writable: a `local_span<T const>` does not compile.
    template <class T>
    constexpr explicit recv(local_span<T> buffer) noexcept requires(Sges == 1) : sg_(detail::as_sg_list(buffer)) {
        static_assert(!std::is_const_v<T>, RDMACXX_RECV_INTO_CONST);
    }
    /// A receive scattered into several spans.
    constexpr explicit recv(sg_list<Sges> const& buffer) noexcept : sg_(buffer) {}
    /// A gathered list with a span of const: does not compile, with the reason.
    template <bool W>
        requires(!W)
    explicit recv(sg_list<Sges, W> const& buffer) : sg_(detail::as_sg_list(buffer)) {
        static_assert(W, RDMACXX_RECV_INTO_CONST);
    }
    /// Not registered memory: does not compile, with the reason.
    template <detail::unregistered_memory M>
    explicit recv(M const&) requires(Sges == 1) {
        static_assert(detail::dependent_false<M>, RDMACXX_NEEDS_LOCAL_SPAN);
    }
    /// Sets the `wr_id` its completion will carry.
    constexpr recv& id(std::uint64_t wr_id) noexcept {
        wr_id_ = wr_id;
        return *this;
    }
    [[nodiscard]] constexpr std::uint64_t wr_id() const noexcept { return wr_id_; }
    [[nodiscard]] constexpr std::span<ibv_sge const, Sges> sges() const noexcept { return sg_.entries; }
    [[nodiscard]] constexpr std::uint64_t bytes() const noexcept { return sg_.bytes; }
    /// Fills `wr`'s `wr_id`, `sg_list` and `num_sge` (every field but `next`, the caller's);
    /// `wr` need not be zeroed first.
    void build(ibv_recv_wr& wr) const noexcept {
        wr.wr_id = wr_id_;
        wr.sg_list = const_cast<ibv_sge*>(sg_.entries.data()); // the provider only reads it
        wr.num_sge = static_cast<int>(Sges);
    }

private:
    sg_list<Sges> sg_;
    std::uint64_t wr_id_ = 0;
};
template <class T>
recv(local_span<T>) -> recv<1>;
template <std::size_t N, bool W>
recv(sg_list<N, W>) -> recv<N>;
template <detail::unregistered_memory M>
recv(M const&) -> recv<1>;

/// A send-queue work request type: an operation with its `ibv_send_wr` opcode, its legality
/// (`transports`, `send_op`, `require_transport`) and its two encodings, `build<Transport>(ibv_send_wr&)`
/// for ibv_post_send(3) and `build<Transport>(ibv_qp_ex*)` for the ibv_wr_* API. See
/// docs/adding-an-operation.md.
template <class W>
concept send_work_request = W::is_send_wr && requires(W const& w, ibv_send_wr& raw, ibv_qp_ex* qpx) {
    { W::opcode } -> std::convertible_to<ibv_wr_opcode>;
    { W::name } -> std::convertible_to<char const*>;
    { W::transports } -> std::convertible_to<transport_set>;
    { W::send_op } -> std::convertible_to<std::uint64_t>;
    w.template build<rc>(raw);
    w.template build<rc>(qpx);
};

/// A receive work request type.
template <class W>
concept recv_work_request = (!W::is_send_wr) && requires(W const& w, ibv_recv_wr& raw) {
    w.build(raw);
};

namespace detail {
/// Fails to compile, with the operation's own sentence, when `Transport` may not carry `W`.
template <class W, class Transport>
constexpr void require_transport() noexcept {
    if constexpr (send_work_request<W>) W::template require_transport<Transport>();
}
} // namespace detail

/// True when transport `Transport` can carry work request `W`: `Transport` is one of
/// `W::transports` (RC everything; UC sends and writes; UD sends only).
template <class W, class Transport>
concept postable_on = send_work_request<W> && transport<Transport> && W::transports.template has<Transport>();

} // namespace v0
} // namespace rdmacxx
