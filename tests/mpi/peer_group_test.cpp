// The MPI bootstrap and the peer group, run by mpirun (tests/mpi/main.cpp): the launched-rank
// test cases over MPI_COMM_WORLD.
#include "rdmacxx/bootstrap/mpi.hpp"

namespace test {
using launched_bootstrap = rdmacxx::mpi_bootstrap;
} // namespace test

#include "../launched/peer_group_cases.hpp"
