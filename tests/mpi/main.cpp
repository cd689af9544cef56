// The runner of the MPI tests: doctest between MPI_Init and MPI_Finalize, launched by mpirun.
// Every rank runs every test case (they are collective); rank 0 prints doctest's report, the
// others print only what failed on them. The exit status is non-zero when any rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#define OMPI_SKIP_MPICXX 1 // the C API only
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    doctest::Context context(argc, argv);
    context.setOption("no-colors", true); // mpirun may hand the ranks a terminal; tools/check reads the summary
    if (rank != 0) context.setOption("minimal", true); // failures only
    int const failed = context.run() != 0 ? 1 : 0;
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && any_failed != 0 && failed == 0)
        std::fprintf(stderr, "[mpi] a test case failed on another rank (see its output above)\n");
    MPI_Finalize();
    return any_failed;
}
