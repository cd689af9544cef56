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
} // namespace detail
} // namespace v0
} // namespace rdmacxx
