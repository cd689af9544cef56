#pragma once
/// @file
/// The C boundary: the only header that includes libibverbs. Everything else in rdmacxx
/// includes this one, never <infiniband/verbs.h> directly.

#include "rdmacxx/version.hpp"

#include <infiniband/verbs.h>

/// Marks a function that only runs on a failure path: kept out of line and out of the hot
/// instruction stream.
#define RDMACXX_COLD [[gnu::cold, gnu::noinline]]

/// Marks a fast-path function that must be inlined whatever the optimisation level or the
/// length of the chain (GCC -O2 declines to inline a 16-request post, which then spills every
/// typed request to memory): the posting and polling paths cost what hand-written verbs cost.
#define RDMACXX_HOT [[gnu::always_inline]]

namespace rdmacxx {
inline namespace v0 {
namespace detail {
/// The stateless deleter of a `std::unique_ptr` over a verbs object: calls `Destroy` (e.g.
/// `&::ibv_destroy_qp`), whose failure a destructor cannot report. No size cost.
template <auto Destroy>
struct destroy_with {
    template <class T>
    void operator()(T* p) const noexcept {
        (void)Destroy(p);
    }
};

/// Moves `qp` to ERR (any state may go there): what is posted completes flushed. Returns whether
/// ibv_modify_qp(3) accepted it; for the paths that cannot report a failure (a cancellation, a
/// peer's end, a drain), where `queue_pair::to_error` would throw.
inline bool move_to_error(ibv_qp* qp) noexcept {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    return ::ibv_modify_qp(qp, &attr, IBV_QP_STATE) == 0;
}
} // namespace detail
} // namespace v0
} // namespace rdmacxx
