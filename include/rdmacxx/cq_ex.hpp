#pragma once
/// @file
/// The extended CQ: `completion_queue_ex<Completion, Fields>`, made by ibv_create_cq_ex(3) and
/// polled in place (ibv_start_poll, ibv_next_poll, ibv_end_poll, ibv_wc_read_*), with the
/// optional completion fields (`wc_field`, `wc_fields<…>`) chosen at compile time, on a context
/// or in a parent domain.

#include "rdmacxx/context.hpp"
#include "rdmacxx/cq.hpp"
#include "rdmacxx/detail/quirks.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/parent_domain.hpp"

#include <arpa/inet.h>

#include <cerrno>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

/// An optional field of an extended completion, asked for when the CQ is created (the
/// `IBV_WC_EX_WITH_*` flags of ibv_create_cq_ex(3)). `wr_id`, the status, the opcode, the vendor
/// error and the WC flags (`has_imm`, `has_grh`) are always there; every other field costs the
/// provider work per completion and is read only when asked for.
/// @see ibv_create_cq_ex(3)
enum class wc_field : std::uint64_t {
    byte_len = static_cast<std::uint64_t>(IBV_WC_EX_WITH_BYTE_LEN), ///< bytes received or transferred
    imm = static_cast<std::uint64_t>(IBV_WC_EX_WITH_IMM),           ///< immediate data (or invalidated rkey)
    qp_num = static_cast<std::uint64_t>(IBV_WC_EX_WITH_QP_NUM),     ///< the local QP number
    src_qp = static_cast<std::uint64_t>(IBV_WC_EX_WITH_SRC_QP),     ///< the sender's QP number (UD)
    slid = static_cast<std::uint64_t>(IBV_WC_EX_WITH_SLID),         ///< the sender's LID (UD, InfiniBand)
    sl = static_cast<std::uint64_t>(IBV_WC_EX_WITH_SL),             ///< the service level (UD)
    dlid_path_bits = static_cast<std::uint64_t>(IBV_WC_EX_WITH_DLID_PATH_BITS),             ///< DLID path bits (UD)
    completion_timestamp = static_cast<std::uint64_t>(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP), ///< device clock ticks
    completion_timestamp_wallclock =
        static_cast<std::uint64_t>(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK), ///< nanoseconds, wall clock
    cvlan = static_cast<std::uint64_t>(IBV_WC_EX_WITH_CVLAN),                      ///< the customer VLAN tag
    flow_tag = static_cast<std::uint64_t>(IBV_WC_EX_WITH_FLOW_TAG),                ///< the flow tag of a steering rule
};

/// How rdmacxx names `f` in messages, e.g. "the completion timestamp (wc_field::completion_timestamp)".
[[nodiscard]] inline std::string describe(wc_field f) {
    switch (f) {
    case wc_field::byte_len:
        return "the byte length (wc_field::byte_len)";
    case wc_field::imm:
        return "the immediate data (wc_field::imm)";
    case wc_field::qp_num:
        return "the QP number (wc_field::qp_num)";
    case wc_field::src_qp:
        return "the source QP number (wc_field::src_qp)";
    case wc_field::slid:
        return "the source LID (wc_field::slid)";
    case wc_field::sl:
        return "the service level (wc_field::sl)";
    case wc_field::dlid_path_bits:
        return "the DLID path bits (wc_field::dlid_path_bits)";
    case wc_field::completion_timestamp:
        return "the completion timestamp (wc_field::completion_timestamp)";
    case wc_field::completion_timestamp_wallclock:
        return "the wall-clock completion timestamp (wc_field::completion_timestamp_wallclock)";
    case wc_field::cvlan:
        return "the customer VLAN (wc_field::cvlan)";
    case wc_field::flow_tag:
        return "the flow tag (wc_field::flow_tag)";
    }
    return "wc_field " + std::to_string(static_cast<std::uint64_t>(f));
}

/// The set of optional fields an extended CQ is created with, e.g.
/// `wc_fields<wc_field::byte_len, wc_field::src_qp>`; `mask` is their `IBV_WC_EX_WITH_*` bits.
/// Reading a field outside the set does not compile.
template <wc_field... Fields>
struct wc_fields {
    /// The `wc_flags` of ibv_cq_init_attr_ex.
    static constexpr std::uint64_t mask = (std::uint64_t{0} | ... | static_cast<std::uint64_t>(Fields));
    /// True when `F` is one of the fields.
    template <wc_field F>
    static constexpr bool has = ((F == Fields) || ...);
    /// Calls `f(field)` for each field, in order.
    template <class F>
    static void for_each(F&& f) {
        (f(Fields), ...);
    }
};

/// The fields most programs read: byte length, immediate data, QP number and source QP number.
using standard_wc_fields = wc_fields<wc_field::byte_len, wc_field::imm, wc_field::qp_num, wc_field::src_qp>;

/// Options of an extended CQ at creation. @see ibv_create_cq_ex(3)
struct cq_ex_options {
    /// The completion vector its events are signalled on, as `cq_options::comp_vector`.
    int comp_vector = 0;
    /// A pointer of the caller's kept with the CQ, as `cq_options::user_context`.
    void* user_context = nullptr;
    /// IBV_CREATE_CQ_ATTR_SINGLE_THREADED: the caller promises one thread at a time on this CQ,
    /// so a provider may poll without its lock (mlx5 does; rxe accepts the flag and still locks).
    /// Implied for a CQ made in a parent domain that has a thread domain.
    bool single_threaded = false;
};

namespace detail {
/// The ibv_create_cq_ex(3) attributes of an extended CQ of `entries` entries with `wc_flags`:
/// IBV_CQ_INIT_ATTR_MASK_FLAGS with IBV_CREATE_CQ_ATTR_SINGLE_THREADED when `single_threaded`,
/// IBV_CQ_INIT_ATTR_MASK_PD with `parent_domain` when `parent_domain` is not null. No channel,
/// vector or user context (the caller's).
[[nodiscard]] inline ibv_cq_init_attr_ex cq_ex_init_attributes(std::uint32_t entries, std::uint64_t wc_flags,
                                                               bool single_threaded, ibv_pd* parent_domain) noexcept {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = entries;
    attr.wc_flags = wc_flags;
    if (single_threaded) {
        attr.comp_mask |= static_cast<std::uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS);
        attr.flags = static_cast<std::uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
    }
    if (parent_domain != nullptr) {
        attr.comp_mask |= static_cast<std::uint32_t>(IBV_CQ_INIT_ATTR_MASK_PD);
        attr.parent_domain = parent_domain;
    }
    return attr;
}

/// A plain protection domain (not a parent domain), const or not.
template <class T>
concept plain_protection_domain = std::same_as<std::remove_const_t<T>, protection_domain>;
} // namespace detail

/// The current completion of an extended CQ while `completion_queue_ex::poll` hands it to the
/// caller: a view, valid only during that call (the provider's buffer moves on after it). Reading
/// a field that the CQ's `Fields` lack does not compile.
/// Thread-safety: as the CQ's poll, on the polling thread only.
/// @see ibv_create_cq_ex(3) ("Polling fields in the completion")
template <class Fields>
class extended_completion {
public:
    /// Views the current completion of `cq`, between a successful ibv_start_poll(3) or
    /// ibv_next_poll(3) and the next call on `cq`.
    explicit extended_completion(ibv_cq_ex* cq) noexcept : cq_(cq) {}

    /// The `wr_id` of the work request it completes.
    [[nodiscard]] std::uint64_t wr_id() const noexcept { return cq_->wr_id; }
    /// The status.
    [[nodiscard]] ibv_wc_status status() const noexcept { return cq_->status; }
    /// True when the status is IBV_WC_SUCCESS.
    [[nodiscard]] bool ok() const noexcept { return cq_->status == IBV_WC_SUCCESS; }
    /// The status as a `std::error_code` in `wc_category()` (false when successful).
    [[nodiscard]] std::error_code error_code() const noexcept { return make_wc_error_code(cq_->status); }
    /// The operation (ibv_wc_read_opcode; valid only when `ok()`).
    [[nodiscard]] ibv_wc_opcode opcode() const noexcept { return ::ibv_wc_read_opcode(cq_); }
    /// True for a receive-queue completion (valid only when `ok()`).
    [[nodiscard]] bool is_recv() const noexcept { return (opcode() & IBV_WC_RECV) != 0; }
    /// The provider's vendor error syndrome (ibv_wc_read_vendor_err; meaningful when not `ok()`).
    [[nodiscard]] std::uint32_t vendor_err() const noexcept { return ::ibv_wc_read_vendor_err(cq_); }
    /// The `IBV_WC_*` flags (ibv_wc_read_wc_flags).
    [[nodiscard]] unsigned wc_flags() const noexcept { return ::ibv_wc_read_wc_flags(cq_); }
    /// True when the sender attached immediate data.
    [[nodiscard]] bool has_imm() const noexcept { return (wc_flags() & IBV_WC_WITH_IMM) != 0; }
    /// True when a 40-byte GRH precedes the payload in the receive buffer (UD).
    [[nodiscard]] bool has_grh() const noexcept { return (wc_flags() & IBV_WC_GRH) != 0; }

    /// Bytes received (receive completions); needs `wc_field::byte_len`.
    [[nodiscard]] std::uint32_t byte_len() const noexcept {
        static_assert(Fields::template has<wc_field::byte_len>,
                      "byte_len(): this CQ was not created with wc_field::byte_len (add it to its wc_fields<...>)");
        return ::ibv_wc_read_byte_len(cq_);
    }
    /// The immediate data in host byte order (meaningful when `has_imm()`); needs `wc_field::imm`.
    [[nodiscard]] std::uint32_t imm_data() const noexcept {
        static_assert(Fields::template has<wc_field::imm>,
                      "imm_data(): this CQ was not created with wc_field::imm (add it to its wc_fields<...>)");
        return ntohl(::ibv_wc_read_imm_data(cq_));
    }
    /// The local QP number; needs `wc_field::qp_num`.
    [[nodiscard]] std::uint32_t qp_num() const noexcept {
        static_assert(Fields::template has<wc_field::qp_num>,
                      "qp_num(): this CQ was not created with wc_field::qp_num (add it to its wc_fields<...>)");
        return ::ibv_wc_read_qp_num(cq_);
    }
    /// The sender's QP number (UD receives); needs `wc_field::src_qp`.
    [[nodiscard]] std::uint32_t src_qp() const noexcept {
        static_assert(Fields::template has<wc_field::src_qp>,
                      "src_qp(): this CQ was not created with wc_field::src_qp (add it to its wc_fields<...>)");
        return ::ibv_wc_read_src_qp(cq_);
    }
    /// The sender's LID (UD on InfiniBand); needs `wc_field::slid`.
    [[nodiscard]] std::uint32_t slid() const noexcept {
        static_assert(Fields::template has<wc_field::slid>,
                      "slid(): this CQ was not created with wc_field::slid (add it to its wc_fields<...>)");
        return ::ibv_wc_read_slid(cq_);
    }
    /// The service level (UD); needs `wc_field::sl`.
    [[nodiscard]] std::uint8_t sl() const noexcept {
        static_assert(Fields::template has<wc_field::sl>,
                      "sl(): this CQ was not created with wc_field::sl (add it to its wc_fields<...>)");
        return ::ibv_wc_read_sl(cq_);
    }
    /// The DLID path bits (UD); needs `wc_field::dlid_path_bits`.
    [[nodiscard]] std::uint8_t dlid_path_bits() const noexcept {
        static_assert(Fields::template has<wc_field::dlid_path_bits>, "dlid_path_bits(): this CQ was not created "
                                                                      "with wc_field::dlid_path_bits (add it to its "
                                                                      "wc_fields<...>)");
        return ::ibv_wc_read_dlid_path_bits(cq_);
    }
    /// When the device completed the request, in ticks of its clock (`device_limits::hca_core_clock`
    /// in kHz, `completion_timestamp_mask` bits); needs `wc_field::completion_timestamp`.
    [[nodiscard]] std::uint64_t completion_timestamp() const noexcept {
        static_assert(Fields::template has<wc_field::completion_timestamp>,
                      "completion_timestamp(): this CQ was not created with wc_field::completion_timestamp (add "
                      "it to its wc_fields<...>)");
        return ::ibv_wc_read_completion_ts(cq_);
    }
    /// When the device completed the request, in nanoseconds of the wall clock; needs
    /// `wc_field::completion_timestamp_wallclock`.
    [[nodiscard]] std::uint64_t completion_wallclock_ns() const noexcept {
        static_assert(Fields::template has<wc_field::completion_timestamp_wallclock>,
                      "completion_wallclock_ns(): this CQ was not created with "
                      "wc_field::completion_timestamp_wallclock (add it to its wc_fields<...>)");
        return ::ibv_wc_read_completion_wallclock_ns(cq_);
    }
    /// The customer VLAN tag; needs `wc_field::cvlan`.
    [[nodiscard]] std::uint16_t cvlan() const noexcept {
        static_assert(Fields::template has<wc_field::cvlan>,
                      "cvlan(): this CQ was not created with wc_field::cvlan (add it to its wc_fields<...>)");
        return ::ibv_wc_read_cvlan(cq_);
    }
    /// The flow tag of the steering rule that matched; needs `wc_field::flow_tag`.
    [[nodiscard]] std::uint32_t flow_tag() const noexcept {
        static_assert(Fields::template has<wc_field::flow_tag>,
                      "flow_tag(): this CQ was not created with wc_field::flow_tag (add it to its wc_fields<...>)");
        return ::ibv_wc_read_flow_tag(cq_);
    }

    /// Throws `wc_error` built from this completion when it failed.
    /// @throws wc_error with the status, vendor error and `wr_id` (and the QP number when the CQ
    ///         has `wc_field::qp_num`).
    void throw_if_error() const {
        if (!ok()) [[unlikely]]
            throw_error();
    }

private:
    RDMACXX_COLD [[noreturn]] void throw_error() const {
        ibv_wc wc{};
        wc.wr_id = cq_->wr_id;
        wc.status = cq_->status;
        wc.vendor_err = ::ibv_wc_read_vendor_err(cq_);
        if constexpr (Fields::template has<wc_field::qp_num>) wc.qp_num = ::ibv_wc_read_qp_num(cq_);
        throw wc_error(wc);
    }

    ibv_cq_ex* cq_;
};

/// Polls an extended CQ in place: what `completion_queue_ex::poller()` returns. Two words (the
/// `ibv_cq_ex` handle and whether the device batches), trivially copyable: kept in a local, it
/// lives in registers across a polling loop. Valid while its CQ exists.
/// Thread-safety: as the CQ's poll, one thread at a time.
/// @see ibv_start_poll(3), ibv_next_poll(3), ibv_end_poll(3)
template <class Fields>
class extended_poller {
public:
    /// What `poll` hands to its visitor.
    using completion = extended_completion<Fields>;

    /// Polls `cq`; `batched` false takes each completion in a batch of its own (see
    /// `completion_queue_ex`).
    extended_poller(ibv_cq_ex* cq, bool batched) noexcept : cq_(cq), batched_(batched) {}

    /// Takes up to `N` completions that are there, without blocking, handing each to
    /// `visit(completion const&)`; returns how many. One call is one batch: ibv_start_poll(3),
    /// ibv_next_poll(3) for each further completion up to `N`, ibv_end_poll(3). When `visit`
    /// throws, the batch is ended (the completion it threw on is taken) and the exception goes on.
    /// @throws sys_error when ibv_start_poll(3) or ibv_next_poll(3) fails other than with
    ///         ENOENT (an empty CQ); what `visit` throws.
    template <std::size_t N = 16, class Visit>
    RDMACXX_HOT std::size_t poll(Visit&& visit) const {
        static_assert(N >= 1, "poll<N> takes at least one completion");
        ibv_cq_ex* const cq = cq_;
        ibv_poll_cq_attr attr{};
        if (int const rc = ::ibv_start_poll(cq, &attr); rc != 0) {
            if (rc == ENOENT) [[likely]]
                return 0;
            detail::throw_verb(rc, "ibv_start_poll", {});
        }
        [[maybe_unused]] bool const batched = N > 1 && batched_;
        std::size_t n = 0;
        for (;;) {
            try {
                visit(static_cast<completion const&>(completion{cq}));
            } catch (...) {
                ::ibv_end_poll(cq);
                throw;
            }
            ++n;
            if constexpr (N == 1) {
                break;
            } else {
                if (n == N) break;
                if (batched) [[likely]] {
                    if (int const rc = ::ibv_next_poll(cq); rc != 0) {
                        if (rc != ENOENT) [[unlikely]]
                            end_and_throw(cq, rc);
                        break;
                    }
                } else {
                    ::ibv_end_poll(cq);
                    if (int const rc = ::ibv_start_poll(cq, &attr); rc != 0) {
                        if (rc != ENOENT) [[unlikely]]
                            detail::throw_verb(rc, "ibv_start_poll", {});
                        return n;
                    }
                }
            }
        }
        ::ibv_end_poll(cq);
        return n;
    }

private:
    [[noreturn]] RDMACXX_COLD static void end_and_throw(ibv_cq_ex* cq, int rc) {
        ::ibv_end_poll(cq); // the manual: end_poll still follows a failed next_poll
        detail::throw_verb(rc, "ibv_next_poll", {});
    }

    ibv_cq_ex* cq_;
    bool batched_;
};

/// An extended completion queue (`ibv_cq_ex`) waited on by the strategy `Completion`
/// (`busy_poll`, `event_driven`, `adaptive`), whose completions carry the optional `Fields`.
///
/// It is a `completion_queue<Completion>`: QPs, `cm::id::create_qp`, `arm`, `note_event`,
/// `resize`, `context()` and moving work as for any CQ. Its own `poll`, `wait` and bounded `wait`
/// take completions in place instead of copying `ibv_wc`s: each completion is handed to a
/// visitor as an `extended_completion<Fields>`, valid during that call (`wait_one` and, through a
/// `completion_queue<Completion>&`, `poll(out)` and `wait(out)` still copy `ibv_wc`s out with
/// ibv_poll_cq(3), which verbs allows on an extended CQ between batches). One poll is one batch:
/// ibv_start_poll(3), ibv_next_poll(3) for each further completion up to `N`, ibv_end_poll(3).
/// On rxe each completion is its own batch (ibv_start_poll, ibv_end_poll): a provider quirk,
/// `detail::quirks::batches_extended_polls` (detail/quirks.hpp).
///
/// Made in a `parent_domain` (the constructors that take one), it is the CQ of the single-threaded
/// resource policy (see `thread_domain`): the provider allocates it through the parent domain and,
/// with the single-threaded flag that a thread domain implies, polls it without a lock. Its QPs
/// are made in the same parent domain. The parent domain must outlive the CQ (the provider holds a
/// reference: mlx5 refuses to free a parent domain that still has CQs). rxe has no parent
/// domains, so there such a CQ is never made: `thread_domain` and `parent_domain` throw first.
/// `completion_queue_ex<Completion>` (no fields) in a parent domain serves as a plain
/// `completion_queue<Completion>` there.
///
/// Thread-safety: one thread polls or waits at a time (with `cq_ex_options::single_threaded`,
/// or in a parent domain with a thread domain, the provider no longer protects itself against a
/// second one).
/// @see ibv_create_cq_ex(3), ibv_start_poll(3), ibv_next_poll(3), ibv_end_poll(3),
///      ibv_alloc_parent_domain(3)
template <class Completion, class Fields = wc_fields<>>
class completion_queue_ex : public completion_queue<Completion> {
    using base = completion_queue<Completion>;
    static_assert(!detail::tracks_in_flight<Completion>,
                  "an extended CQ is not tracked: use busy_poll, event_driven or adaptive, not checked<...>");

public:
    /// The optional fields of its completions.
    using fields = Fields;
    /// What `poll` hands to its visitor.
    using completion = extended_completion<Fields>;

    /// Creates an extended CQ of at least `min_entries` entries on `ctx` with `Fields`, on the
    /// completion vector, user context and threading that `opt` names; an `event_driven` or
    /// `adaptive` CQ gets its own completion channel.
    /// @throws argument_error when `min_entries` < 1 or `opt.comp_vector` is not one of the
    ///         device's vectors (nothing created); not_supported_error naming the device and each
    ///         field (or the single-threaded flag) it refuses, e.g. "the completion timestamp
    ///         (wc_field::completion_timestamp)" on rxe; sys_error when ibv_create_cq_ex(3) fails
    ///         otherwise.
    completion_queue_ex(rdmacxx::context& ctx, int min_entries, cq_ex_options const& opt = {})
        : base(detail::adopt_cq_t{}, ctx, opt.comp_vector, nullptr,
               [&](ibv_comp_channel* ch) { return create(ctx, min_entries, ch, opt, nullptr); }),
          batched_(batches(ctx)) {}

    /// Creates an `event_driven` or `adaptive` extended CQ whose events arrive on `channel`,
    /// which may serve other CQs; otherwise as the constructor above.
    /// @throws as the constructor above.
    completion_queue_ex(rdmacxx::context& ctx, int min_entries, completion_channel& channel,
                        cq_ex_options const& opt = {}) requires(Completion::uses_channel)
        : base(detail::adopt_cq_t{}, ctx, opt.comp_vector, &channel,
               [&](ibv_comp_channel* ch) { return create(ctx, min_entries, ch, opt, nullptr); }),
          batched_(batches(ctx)) {}

    /// Creates an extended CQ of at least `min_entries` entries in the parent domain `parent`, on
    /// its context: ibv_create_cq_ex(3) with IBV_CQ_INIT_ATTR_MASK_PD and `parent` as the
    /// `parent_domain`, and IBV_CREATE_CQ_ATTR_SINGLE_THREADED when `parent` has a thread domain
    /// or `opt.single_threaded` asks for it; otherwise as the constructor on a context. `parent`
    /// must outlive the CQ; make the CQ's QPs in `parent` too.
    /// @throws argument_error when `parent` is empty (moved from), `min_entries` < 1 or
    ///         `opt.comp_vector` is not one of the device's vectors (nothing created);
    ///         not_supported_error naming ibv_create_cq_ex, the device and what it refuses alone
    ///         ("a parent domain (IBV_CQ_INIT_ATTR_MASK_PD)", a field, the single-threaded flag);
    ///         sys_error when ibv_create_cq_ex(3) fails otherwise.
    completion_queue_ex(parent_domain const& parent, int min_entries, cq_ex_options const& opt = {})
        : base(detail::adopt_cq_t{}, nonempty(parent).context(), opt.comp_vector, nullptr,
               [&](ibv_comp_channel* ch) {
                   return create(parent.context(), min_entries, ch, in_domain(parent, opt), &parent);
               }),
          batched_(batches(parent.context())) {}

    /// Creates an `event_driven` or `adaptive` extended CQ in the parent domain `parent` whose
    /// events arrive on `channel`, which may serve other CQs; otherwise as the constructor above.
    /// @throws as the constructor above.
    completion_queue_ex(parent_domain const& parent, int min_entries, completion_channel& channel,
                        cq_ex_options const& opt = {}) requires(Completion::uses_channel)
        : base(detail::adopt_cq_t{}, nonempty(parent).context(), opt.comp_vector, &channel,
               [&](ibv_comp_channel* ch) {
                   return create(parent.context(), min_entries, ch, in_domain(parent, opt), &parent);
               }),
          batched_(batches(parent.context())) {}

    /// A plain `protection_domain` where a parent domain is expected: does not compile, with the
    /// reason (verbs would ignore it or refuse it at run time, depending on the provider).
    template <detail::plain_protection_domain Pd, class... Rest>
    completion_queue_ex(Pd& pd, int min_entries, Rest&&... /*rest*/)
        : completion_queue_ex(pd.context(), min_entries) { // delegates so that the assertion is the one error
        static_assert(std::is_same_v<Pd, parent_domain>,
                      "an extended CQ is made on a context or in a parent_domain, not in a protection_domain: pass "
                      "the parent_domain itself (or pd.context() for a CQ outside any domain)");
    }

    /// Takes up to `N` completions that are there, without blocking, handing each to
    /// `visit(completion const&)`; returns how many. As `poller().poll<N>(visit)`: in a hot loop,
    /// hold the poller instead (it keeps the handle in a register, as hand-written code does).
    /// @throws sys_error when ibv_start_poll(3) or ibv_next_poll(3) fails other than with
    ///         ENOENT (an empty CQ); what `visit` throws.
    template <std::size_t N = 16, class Visit>
    RDMACXX_HOT std::size_t poll(Visit&& visit) {
        return poller().template poll<N>(visit);
    }

    /// The poller of this CQ: a handle-sized view that polls it, valid as long as the CQ exists
    /// (moving the CQ keeps it valid).
    [[nodiscard]] extended_poller<Fields> poller() const noexcept { return {extended_handle(), batched_}; }

    /// Blocks until at least one completion is there, then takes up to `N` as `poll<N>(visit)`
    /// does; returns how many (at least 1). Spins, sleeps on the channel, or spins then sleeps
    /// as `Completion` says, exactly as `completion_queue::wait`.
    /// @throws sys_error when polling, arming or reading the channel fails; what `visit` throws.
    template <std::size_t N = 16, class Visit>
    std::size_t wait(Visit&& visit) {
        return this->wait_with([&] { return poll<N>(visit); });
    }

    /// As `wait(visit)`, for at most `timeout` (a `std::chrono` duration; zero or negative: poll
    /// once): returns how many completions it took, 0 when none came in time. Bounded as
    /// `completion_queue::wait(out, timeout)`.
    /// @throws sys_error as `wait(visit)`; what `visit` throws.
    template <std::size_t N = 16, class Visit, class Rep, class Period>
    [[nodiscard]] std::size_t wait(Visit&& visit, std::chrono::duration<Rep, Period> timeout) {
        return this->wait_until_with([&] { return poll<N>(visit); }, detail::deadline_after(timeout));
    }

    /// False on devices whose every completion is polled as its own batch (rxe: see the class).
    [[nodiscard]] bool batches_polls() const noexcept { return batched_; }
    /// The extended verbs handle (the same object as `native_handle()`).
    [[nodiscard]] ibv_cq_ex* extended_handle() const noexcept {
        // ibv_cq_ex begins with the fields of ibv_cq: verbs casts between the two (ibv_cq_ex_to_cq).
        return reinterpret_cast<ibv_cq_ex*>(this->native_handle());
    }

private:
    // `parent`, checked before anything is created: a moved-from parent domain has no handle.
    static parent_domain const& nonempty(parent_domain const& parent) {
        if (parent.native_handle() == nullptr) [[unlikely]]
            detail::throw_argument("an extended CQ in a parent domain: the parent domain is empty (moved from)");
        return parent;
    }
    // `opt` for a CQ in `parent`: a thread domain implies the single-threaded flag.
    static cq_ex_options in_domain(parent_domain const& parent, cq_ex_options opt) noexcept {
        opt.single_threaded = opt.single_threaded || parent.td() != nullptr;
        return opt;
    }

    static ibv_cq* create(rdmacxx::context& ctx, int min_entries, ibv_comp_channel* channel, cq_ex_options const& opt,
                          parent_domain const* parent) {
        if (min_entries < 1) [[unlikely]]
            detail::throw_argument("an extended CQ has at least 1 entry, not " + std::to_string(min_entries));
        ibv_pd* const domain = parent != nullptr ? parent->native_handle() : nullptr;
        ibv_cq_init_attr_ex attr = detail::cq_ex_init_attributes(static_cast<std::uint32_t>(min_entries), Fields::mask,
                                                                 opt.single_threaded, domain);
        attr.cq_context = opt.user_context;
        attr.channel = channel;
        attr.comp_vector = static_cast<std::uint32_t>(opt.comp_vector);
        ibv_cq_ex* const cq = ::ibv_create_cq_ex(ctx.native_handle(), &attr);
        if (cq == nullptr) [[unlikely]]
            refuse(errno, ctx, min_entries, opt.single_threaded, domain);
        return ::ibv_cq_ex_to_cq(cq);
    }

    // ibv_create_cq_ex failed with `err`: when the device does not have something asked for,
    // names each field (and the flag, and the parent domain) that it refuses alone, found by
    // asking for each in turn.
    [[noreturn]] RDMACXX_COLD static void refuse(int err, rdmacxx::context& ctx, int min_entries, bool single_threaded,
                                                 ibv_pd* domain) {
        if (err == 0) err = EIO;
        std::string const device{ctx.name()};
        if (detail::means_not_supported(err) || err == EINVAL) {
            auto const refused = [&](std::uint64_t wc_flags, bool flag, ibv_pd* in_domain) {
                ibv_cq_init_attr_ex attr = detail::cq_ex_init_attributes(1, wc_flags, flag, in_domain);
                ibv_cq_ex* const probe = ::ibv_create_cq_ex(ctx.native_handle(), &attr);
                if (probe == nullptr) return true;
                (void)::ibv_destroy_cq(::ibv_cq_ex_to_cq(probe));
                return false;
            };
            std::string names;
            auto const name = [&](std::string const& what) { names += (names.empty() ? "" : ", ") + what; };
            Fields::for_each([&](wc_field f) {
                if (refused(static_cast<std::uint64_t>(f), false, nullptr)) name(describe(f));
            });
            if (single_threaded && refused(0, true, nullptr))
                name("the single-threaded flag (IBV_CREATE_CQ_ATTR_SINGLE_THREADED)");
            if (domain != nullptr && refused(0, false, domain)) name("a parent domain (IBV_CQ_INIT_ATTR_MASK_PD)");
            if (!names.empty())
                throw not_supported_error(err, "ibv_create_cq_ex",
                                          "on " + device + ": the device does not provide " + names +
                                              " for an extended CQ");
        }
        detail::throw_verb(err, "ibv_create_cq_ex",
                           "on " + device + " for an extended CQ of " + std::to_string(min_entries) +
                               " entries with wc_flags 0x" + detail::hex(Fields::mask) +
                               (domain != nullptr ? " in a parent domain" : ""));
    }

    // rxe takes one completion per batch: a provider quirk, detail/quirks.hpp.
    static bool batches(rdmacxx::context& ctx) {
        return detail::quirks::batches_extended_polls(ctx.query_device().orig_attr.vendor_id);
    }

    bool batched_;
};

} // namespace v0
} // namespace rdmacxx
