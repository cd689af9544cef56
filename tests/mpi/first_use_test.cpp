// The peer group's ring with and without connections on first use over MPI, run by mpirun
// (tests/mpi/main.cpp): the launched-rank first-use cases.
#include "rdmacxx/bootstrap/mpi.hpp"

namespace test {
using launched_bootstrap = rdmacxx::mpi_bootstrap;
} // namespace test

#include "../launched/first_use_cases.hpp"
