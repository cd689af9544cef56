/* mpi_hello — the smallest MPI check across softroce nodes (tools/nodes-selftest): every rank
 * names its host, and an allreduce over the wire sums the ranks. Exit status 0 when the sum is
 * right. Built by tools/check with mpicc. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char** argv) {
  int rank = 0, size = 0, sum = 0;
  char host[256] = "";
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  gethostname(host, sizeof host - 1);
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d of %d on %s: sum of ranks %d\n", rank, size, host, sum);
  MPI_Finalize();
  return sum == size * (size - 1) / 2 ? 0 : 1;
}
