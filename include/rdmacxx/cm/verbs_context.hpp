#pragma once
/// @file
/// `cm::verbs_context`: the `rdmacxx::context` over a device context that librdmacm opened.

#include "rdmacxx/context.hpp"
#include "rdmacxx/error.hpp"

#include <map>
#include <memory>
#include <mutex>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// The `rdmacxx::context` wrapping a verbs context that librdmacm opened (`id->verbs`), so that
/// protection domains, CQs and memory can be made on it. librdmacm keeps its device contexts
/// open for the life of the process, so the wrapper is never destroyed and never closes it;
/// one wrapper per device, made on first use.
/// Thread-safety: thread-safe (a mutex guards the table).
[[nodiscard]] inline rdmacxx::context& verbs_context(ibv_context* verbs) {
    if (verbs == nullptr) [[unlikely]]
        rdmacxx::detail::throw_argument(
            "the CM id is not bound to an RDMA device yet: bind it or resolve an address first");
    // Never-destroyed storage: the contexts belong to librdmacm.
    struct borrowed {
        explicit borrowed(ibv_context* c) : ctx(c) {} // may throw std::bad_alloc (the context's anchor)
        borrowed(borrowed const&) = delete;
        borrowed& operator=(borrowed const&) = delete;
        ~borrowed() {} // NOLINT(modernize-use-equals-default): "= default" would be deleted (union member)
        union {
            rdmacxx::context ctx;
        };
    };
    static std::mutex mutex;
    static auto* const table = new std::map<ibv_context*, std::unique_ptr<borrowed>>;
    std::lock_guard lock{mutex};
    auto& slot = (*table)[verbs];
    if (!slot) slot = std::make_unique<borrowed>(verbs);
    return slot->ctx;
}

} // namespace cm
} // namespace v0
} // namespace rdmacxx
