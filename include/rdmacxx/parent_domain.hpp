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
/// Owns the parent domain's handle (freed with ibv_dealloc_pd(3)); move-only. It finds the
/// protection domain and the thread domain it was made from wherever they have moved to (`pd()`,
/// `td()`), and what is made in it follows it as it follows any protection domain (see
/// docs/ownership.md). They must outlive it, and it everything made in it (the device refuses
/// to free them while it exists). Moving it into a plain `protection_domain` variable, which
/// would keep the handle but forget `pd()` and `td()`, does not compile.
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
    parent_domain(parent_domain&& other) noexcept
        : protection_domain(static_cast<protection_domain&&>(other)), pd_(std::move(other.pd_)),
          td_(std::move(other.td_)) {}
    /// Deallocates the parent domain held, as the destructor does, then takes over
    /// `other`'s.
    parent_domain& operator=(parent_domain&& other) noexcept {
        if (this != &other) {
            protection_domain::operator=(static_cast<protection_domain&&>(other));
            pd_ = other.pd_;
            td_ = other.td_;
        }
        return *this;
    }
    parent_domain(parent_domain const&) = delete;
    parent_domain& operator=(parent_domain const&) = delete;
    /// Deallocates the parent domain (ibv_dealloc_pd(3)).
    ~parent_domain() = default;

    /// The protection domain it was made from, wherever it has moved to.
    /// @throws orphaned_error when that protection domain was destroyed.
    [[nodiscard]] protection_domain& pd() const { return pd_.get("parent domain", "protection domain"); }
    /// The thread domain it was made with, wherever it has moved to, or null when it has none.
    /// @throws orphaned_error when that thread domain was destroyed.
    [[nodiscard]] thread_domain* td() const { return td_.get_optional("parent domain", "thread domain"); }

private:
    parent_domain(protection_domain& pd, thread_domain* td)
        : protection_domain(pd.context(), allocate(pd, td)), pd_(pd.anchor_cell()),
          td_(td != nullptr ? td->anchor_cell() : detail::link<thread_domain>{}) {}

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

    detail::link<protection_domain> pd_;
    detail::link<thread_domain> td_; // empty when it has none
};

} // namespace v0
} // namespace rdmacxx
