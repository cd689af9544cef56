// The peer group's ring with and without connections on first use over PMIx, run by mpirun
// (tests/pmix/main.cpp): the launched-rank first-use cases.
#include "rdmacxx/bootstrap/pmix.hpp"

namespace test {
using launched_bootstrap = rdmacxx::pmix_bootstrap;
} // namespace test

#include "../launched/first_use_cases.hpp"
