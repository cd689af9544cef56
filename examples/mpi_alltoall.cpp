// mpi_alltoall: every rank RDMA-writes a block to every other rank with write-with-immediate (the
// immediate names the writer), into the slot that rank exposes for it; each receiver verifies
// every byte of every block. Launched by mpirun, connected by a peer_group over MPI.
//
//   mpirun -np 3 -H node1,node2,node3 mpi_alltoall [-s BLOCK_BYTES] [-r ROUNDS] [-d DEVICE] [-i PORT]
#include "mpi_common.hpp"

#include <unistd.h>

#include <cstddef>
#include <vector>

namespace rx = rdmacxx;

namespace {
// The byte `k` of the block rank `from` writes to rank `to` in round `round`.
std::byte pattern(int from, int to, unsigned round, std::size_t k) {
    return static_cast<std::byte>(
        (k * 131 + static_cast<std::size_t>(from) * 17 + static_cast<std::size_t>(to) * 5 + round) & 0xff);
}

int alltoall(int argc, char** argv) {
    launched_example::block_options o{.bytes = std::size_t{64} * 1024, .rounds = 4};
    if (!launched_example::parse_block_options(argc, argv, "mpi_alltoall", o)) return 2;
    std::size_t const block = o.bytes;
    unsigned const rounds = o.rounds;
    rx::mpi_bootstrap boot;
    int const n = boot.size();
    int const me = boot.rank();
    auto const slots = static_cast<std::size_t>(n);
    rx::context ctx = mpi_example::open_device(o.device);
    rx::end_port port{ctx, static_cast<std::uint8_t>(o.ib_port)};
    rx::protection_domain pd{ctx};
    // inbox: one slot per writer; outbox: one block per reader.
    std::vector<std::byte> inbox(slots * block), outbox(slots * block);
    rx::memory_region in_mr = pd.register_memory(std::span{inbox}, rx::access::local_write | rx::access::remote_write);
    rx::memory_region out_mr = pd.register_memory(std::span{outbox}, rx::access::local_write);
    rx::completion_queue<rx::busy_poll> cq{ctx, static_cast<int>(4 * slots)};
    rx::peer_group_options opt;
    opt.settings.remote_access = rx::access::remote_write; // the peers write into the inbox
    rx::peer_group<rx::busy_poll> group{boot, port, pd, cq, cq, in_mr.remote(), opt};

    unsigned bad_blocks = 0;
    double const start = MPI_Wtime();
    for (unsigned round = 0; round < rounds; ++round) {
        for (int r = 0; r < n; ++r) {
            if (r == me) continue;
            group.qp(r).post_recv(rx::recv{in_mr.span().first(0)}.id(1));
            auto const out = out_mr.span().subspan(static_cast<std::size_t>(r) * block, block);
            for (std::size_t k = 0; k < block; ++k)
                out[k] = pattern(me, r, round, k);
        }
        boot.barrier(); // every receive is up before anyone writes
        for (int r = 0; r < n; ++r) {
            if (r == me) continue;
            auto const out = out_mr.span().subspan(static_cast<std::size_t>(r) * block, block);
            auto const target = group.remote(r).subspan(static_cast<std::size_t>(me) * block, block);
            group.qp(r).post(rx::write_imm{out, target, static_cast<std::uint32_t>(me)}.id(2));
        }
        std::vector<bool> heard(slots, false);
        for (int done = 0; done < 2 * (n - 1);) {
            rx::work_completion const wc = mpi_example::next_completion(cq);
            ++done;
            if (wc.wr_id() != 1) continue;
            int const from = static_cast<int>(wc.imm_data());
            if (from < 0 || from >= n || from == me || heard[static_cast<std::size_t>(from)])
                throw rx::argument_error("unexpected immediate " + std::to_string(wc.imm_data()));
            heard[static_cast<std::size_t>(from)] = true;
            std::byte const* slot = inbox.data() + static_cast<std::size_t>(from) * block;
            for (std::size_t k = 0; k < block; ++k)
                if (slot[k] != pattern(from, me, round, k)) {
                    std::fprintf(stderr, "rank %d round %u: block from rank %d differs at byte %zu\n", me, round, from,
                                 k);
                    ++bad_blocks;
                    break;
                }
        }
        boot.barrier(); // nobody overwrites a slot before its reader has checked it
    }
    double const seconds = MPI_Wtime() - start;
    unsigned total_bad = 0;
    MPI_Reduce(&bad_blocks, &total_bad, 1, MPI_UNSIGNED, MPI_SUM, 0, MPI_COMM_WORLD);
    char host[256] = {};
    (void)::gethostname(host, sizeof host - 1);
    std::printf("rank %d on %s: %u blocks of %zu bytes received, %u bad\n", me, host,
                rounds * static_cast<unsigned>(n - 1), block, bad_blocks);
    std::fflush(stdout);
    boot.barrier();
    if (me == 0) {
        auto const blocks = static_cast<double>(rounds) * n * (n - 1);
        std::printf(
            "mpi_alltoall: %d ranks, %u rounds, %.0f blocks of %zu bytes, %.0f bytes moved in %.3f s (%.2f MB/s)\n", n,
            rounds, blocks, block, blocks * static_cast<double>(block), seconds,
            blocks * static_cast<double>(block) / seconds / 1e6);
        std::printf("verified: %.0f of %.0f blocks matched byte for byte\n", blocks - total_bad, blocks);
    }
    return total_bad == 0 ? 0 : 1;
}
} // namespace

int main(int argc, char** argv) { return mpi_example::run(argc, argv, alltoall); }
