#pragma once
/// @file
/// `parent_domain`: a protection domain that carries a thread domain, for lock-free QPs and
/// CQs on devices that have them.

#include "rdmacxx/context.hpp"
#include "rdmacxx/error.hpp"
#include "rdmacxx/pd.hpp"
#include "rdmacxx/thread_domain.hpp"

#include <cerrno>
#include <string>

namespace rdmacxx {
inline namespace v0 {

/// A parent domain (`ibv_alloc_parent_domain`): an `ibv_pd` made from a protection domain and,
/// optionally, a thread domain. It *is* a `protection_domain` (it derives from it), so QPs,
/// SRQs, address handles and memory regions are created in it exactly as in any domain:
/// `queue_pair<rc, busy_poll> qp{parent, cq, cq, caps}`, `parent.register_memory(...)`. CQs,
/// which verbs make outside any protection domain, join it as extended CQs:
/// `completion_queue_ex<busy_poll> cq{parent, 256}` (see cq_ex.hpp).
/// Objects created in it are protected by `pd()`'s keys; with a thread domain they follow its
/// single-threaded resource policy (see `thread_domain`): the provider may post to and poll
/// them without locks, and the program must drive each from one thread at a time.
///
/// Owns the parent domain's handle (freed with ibv_dealloc_pd(3)); move-only; the protection
/// domain and the thread domain it was made from must outlive it, as must it everything made in
/// it. Do not move it into a plain `protection_domain` variable: that keeps the handle but
/// forgets `pd()` and `td()`.
///
/// Many devices (rxe among them) have no parent domains: the constructor then throws
/// `not_supported_error` and the program uses the protection domain itself.
/// Thread-safety: as `protection_domain`.
/// @see ibv_alloc_parent_domain(3), ibv_alloc_td(3)
class parent_domain : public protection_domain {
public:
    /// A parent domain over `pd` without a thread domain.
    /// @throws not_supported_error naming ibv_alloc_parent_domain and the device when the
    ///         provider has no parent domains (EOPNOTSUPP); sys_error when the verb fails
    ///         otherwise; std::bad_alloc.
    explicit parent_domain(protection_domain& pd) : parent_domain(pd, nullptr) {}
    /// A parent domain over `pd` with thread domain `td` (both on the same device).
    /// @throws as the constructor above; argument_error when `td` is empty (moved from) or on
    ///         another context than `pd` (before anything reaches the device).
    parent_domain(protection_domain& pd, thread_domain& td) : parent_domain(pd, &checked(pd, td)) {}
    /// Takes over `other`'s parent domain and the objects made in it; `other` is left empty.
    parent_domain(parent_domain&& other) noexcept = default;
    /// Deallocates the parent domain held (everything made in it must be gone), then takes over
    /// `other`'s.
    parent_domain& operator=(parent_domain&& other) noexcept = default;
    parent_domain(parent_domain const&) = delete;
    parent_domain& operator=(parent_domain const&) = delete;
    /// Deallocates the parent domain (ibv_dealloc_pd(3)).
    ~parent_domain() = default;

    /// The protection domain it was made from, wherever it has moved to.
    [[nodiscard]] protection_domain& pd() const noexcept { return **pd_; }
    /// The thread domain it was made with, or null when it has none.
    [[nodiscard]] thread_domain* td() const noexcept { return td_; }

private:
    parent_domain(protection_domain& pd, thread_domain* td)
        : protection_domain(pd.context(), allocate(pd, td)), pd_(pd.anchor_cell()), td_(td) {}

    static thread_domain& checked(protection_domain& pd, thread_domain& td) {
        if (td.native_handle() == nullptr) [[unlikely]]
            detail::throw_argument("parent_domain: the thread domain is empty (moved from)");
        if (&td.context() != &pd.context()) [[unlikely]]
            detail::throw_argument("parent_domain: the thread domain is on " + std::string{td.context().name()} +
                                   ", the protection domain on " + std::string{pd.context().name()});
        return td;
    }
    static ibv_pd* allocate(protection_domain& pd, thread_domain* td) {
        ibv_parent_domain_init_attr attr{};
        attr.pd = pd.native_handle();
        attr.td = td != nullptr ? td->native_handle() : nullptr;
        ibv_pd* const parent = ::ibv_alloc_parent_domain(pd.context().native_handle(), &attr);
        if (parent == nullptr) [[unlikely]] {
            int const err = errno;
            detail::throw_verb(err != 0 ? err : EIO, "ibv_alloc_parent_domain",
                               "on " + std::string{pd.context().name()} + ": allocating a parent domain " +
                                   (td != nullptr ? "with a thread domain" : "without a thread domain"));
        }
        return parent;
    }

    protection_domain* const* pd_;
    thread_domain* td_;
};

} // namespace v0
} // namespace rdmacxx
