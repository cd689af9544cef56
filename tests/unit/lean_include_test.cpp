// A user who does not use checked<C> does not compile it: the verbs headers and the umbrella
// header bring neither checked.hpp nor its ledgers, nor the mutex, hash map and iostream they
// need; and the verbs umbrella brings nothing of librdmacm. The checks are the preprocessor's
// and the compiler's: this file does not build when an include chain comes back. Nor do they
// bring a launcher's header (<mpi.h>, <pmix.h>).
#include "rdmacxx/verbs.hpp"

// libstdc++'s include guards (the library these builds use).
#if defined(_GLIBCXX_MUTEX) || defined(_GLIBCXX_UNORDERED_MAP) || defined(_GLIBCXX_IOSTREAM) || defined(_GLIBCXX_THREAD)
#error "a verbs header includes <mutex>, <unordered_map>, <iostream> or <thread>: checked.hpp's chain is back"
#endif

// <rdma/rdma_cma.h>'s include guard: a program of the verbs alone must link without librdmacm.
#if defined(RDMA_CMA_H)
#error "rdmacxx/verbs.hpp includes <rdma/rdma_cma.h>: a verbs header reaches the connection manager"
#endif

// The umbrella header: everything but checked.hpp (the CM brings <mutex> and <thread> of its own).
#include "rdmacxx/rdmacxx.hpp"

#if defined(_GLIBCXX_UNORDERED_MAP) || defined(_GLIBCXX_IOSTREAM)
#error "rdmacxx.hpp includes <unordered_map> or <iostream>: checked.hpp's chain is back"
#endif

// The launcher engines come only with their own headers (rdmacxx/bootstrap/mpi.hpp, pmix.hpp):
// neither the umbrella nor the peer group brings <mpi.h> or <pmix.h> (their include guards).
#include "rdmacxx/bootstrap/peer_group.hpp"

#if defined(OMPI_MPI_H) || defined(MPI_VERSION) || defined(PMIx_H) || defined(PMIX_VERSION_MAJOR)
#error "the umbrella or the peer group includes <mpi.h> or <pmix.h>: an engine's header is reached"
#endif

#include <doctest/doctest.h>

// Were checked.hpp or its ledgers (checked/) included, these declarations would clash with theirs.
namespace rdmacxx {
inline namespace v0 {
[[maybe_unused]] constexpr int checked = 0;
namespace detail {
[[maybe_unused]] constexpr int region_ledger = 0;
[[maybe_unused]] constexpr int failure_notes = 0;
} // namespace detail
} // namespace v0
} // namespace rdmacxx

TEST_CASE("the verbs headers compile without checked.hpp, and a plain strategy is untracked") {
    static_assert(!rdmacxx::detail::tracks_in_flight<rdmacxx::busy_poll>);
    static_assert(!rdmacxx::detail::tracks_in_flight<rdmacxx::event_driven>);
    static_assert(!rdmacxx::detail::tracks_in_flight<rdmacxx::adaptive>);
    CHECK(rdmacxx::checked == 0); // this file's own `checked`: the library declares none here
}
