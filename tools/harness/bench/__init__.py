"""bench — rdmacxx head to head with perftest, and against raw verbs, on one real device.

Usage: tools/bench [--quick] [--out DIR] [--h2h-reps N] [--reps N] [--passes P] [--min-time S]
                   [--full] [--reg-max BYTES] [--build DIR] [--no-perftest] [--no-suite]
                   [--groups "G …"] [--report-only]
       tools/bench --nodes 2 [--rails 2] [--quick] [--out DIR] [--h2h-reps N] [--build DIR] [--report-only]

Builds what it runs (release, in --build, default build-perf: benchmarks/bench,
benchmarks/bench-asio when Meson finds Asio, and rdmacxx-perf) when needed, then makes ONE
tools/softroce run (one VM boot on a host without an RDMA device, RDMACXX_SOFTROCE_MEMORY
default 4G so that 1 GiB registrations fit) in which it:
  1. records the environment: kernel, rdma-core / perftest versions (dpkg-query), device,
     path MTU, the RoCE v2 GID index, CPUs, memory;
  2. head to head (unless --no-perftest): perftest (ib_send_lat, …) and rdmacxx-perf
     (benchmarks/perf) with IDENTICAL flags, both as two processes, server in the background
     and client to $RDMACXX_ADDR, -d $RDMACXX_DEVICE -x GID, alternately (the order flips every
     repetition), --h2h-reps times each (default 5):
       latency: send_lat, write_lat, read_lat and atomic_lat 8 B, send_lat 8 B with -e
         (events); -n 500 -I 0 (perftest 4.5 turns inline off on
         rxe whatever -I says, so inline would not be the same experiment)
       bandwidth: send_bw, write_bw, read_bw 64 KiB, and write_bw -b, -n 200 -t 128 -Q 16 -l 1
         (-I 0 but for read_bw: perftest refuses -I on READ and atomics)
       message rate: send_bw and write_bw 8 B -n 4096 -t 128 -l 16 -Q 16 -I 0, read_bw and
         atomic_bw 8 B -n 4096 -t 128 -l 1 -Q 16
     then the defaults block: `ib_send_bw -s S` / `ib_write_bw -s S` against `rdmacxx-perf
     send_bw -s S` / `write_bw -s S` at 2, 8 and 64 B, each with its own defaults (perftest:
     post list 1, CQ moderation 100, its inline choice; rdmacxx-perf: chains of 16, one in 64
     signaled, inline up to the device's limit);
  3. unless --no-suite: the registration cost, register_memory against ibv_reg_mr, 4 KiB …
     --reg-max (default 1 GiB, capped at a third of the VM's memory) on 4 KiB pages, transparent
     huge pages (MADV_HUGEPAGE) and MAP_HUGETLB (the pool reserved in the VM for that run only),
     one process per kind of page, --reps interleaved repetitions; then the in-process twin
     suite: Google Benchmark, rdmacxx against the raw-verbs twin doing identical work in the same
     process, group by group (lat, bw, rate, cq) in PASSES processes (default 2) of --reps
     interleaved repetitions (default 3); and in the same passes the group asio
     (benchmarks/bench-asio, when built): co_await on rdmacxx::io against the plain
     event-driven twin (rdmacxx, no Asio) and the raw-verbs event-driven twin, 8-byte SEND and
     WRITE-with-immediate round trips and the SEND message rate with 64 in flight;
then, on the host, prints the tables: DIR/head-to-head.txt (per row the perftest and
rdmacxx-perf medians, their min-max spread, and the ratio rdmacxx/perftest), DIR/suite.txt
(per row rdmacxx, raw, rdmacxx/raw; then the Asio table: per row co_await, plain, raw, and the
ratios co_await/plain, co_await/raw, plain/raw, with co_await's heap allocations per operation),
DIR/head-to-head.json, DIR/suite.json, DIR/env.json,
DIR/latency.svg/.png and DIR/bandwidth.svg/.png (gnuplot), and every raw output under DIR/runs/.

--quick: a smoke-sized run: head to head on send_lat 8 B, write_lat 8 B, write_bw 64 KiB and
  the send_bw 8 B message rate, 2 repetitions each, the defaults block at 8 B only; the suite
  in 1 pass of 1 repetition (min-time 0.01) with registrations up to 16 MiB.

Options:
  --out DIR       output folder (default bench-results/, gitignored; bench-results/nodes/ with --nodes 2)
  --h2h-reps N    repetitions of each head-to-head row and tool (default 5)
  --reps N        suite: repetitions per benchmark and process (default 3)
  --passes P      suite: processes per group (default 2)
  --min-time S    suite: Google Benchmark --benchmark_min_time (default 0.05; no unit suffix)
  --full          suite: the full size lists
  --reg-max B     largest registration tried (default 1073741824 = 1 GiB)
  --build DIR     build folder (default build-perf; build-nodes with --nodes 2)
  --no-perftest   no head to head
  --no-suite      no twin suite, no registration, no asio
  --groups "G …"  suite: only these of reg (registration), lat, bw, rate, cq, asio (default all)
  --report-only   no device run: print the tables from DIR/runs of an earlier run

Across the wire (--nodes 2): ONE `tools/softroce --nodes 2` run; the same head-to-head rows (and
the defaults block), each server on node 1 and each client on node 2 (over ssh), alternately,
--h2h-reps times. No suite (it is one process). With --rails 2 (`tools/softroce --nodes 2 --rails 2`)
also one rail against two: examples/multirail_copy from node 1 to node 2 over rxe0 alone and over
rxe0 and rxe1 striped, alternately, --h2h-reps times each (3 rounds of 64 MiB; --quick 2 of 16),
every byte verified; DIR/multirail.txt has the MB/s medians, their spread and the ratio (add
--no-perftest for these rows alone).

Conventions: latency is perftest's t_typical (the median; half a round trip for send_lat and
write_lat, the whole operation for read_lat and atomic_lat), from both tools' own output, parsed
alike; bandwidth is BW average (MiB/s, as perftest prints it) and message rate MsgRate (Mpps),
from whichever side printed figures (perftest's ib_send_bw prints them on the server).
Soft-RoCE under QEMU emulation measures the software path, never a NIC, on a shared host: only
the ratios of one run mean anything, and the spread says how far to trust them.

Exit status: 0 when the tables were printed; 1 when the run failed; 2 on a usage error.

How it is made (tools/harness/bench/): cli (flags, and what runs where), host (the build and the
one tools/softroce run), inside (the device run: tools/bench --inside, in the VM), env (the
environment record), h2h (the head-to-head rows, command lines and figures), nodes (node 2 over
ssh), suite (the registration and twin-suite runs and their medians), tables (the text tables and
JSON), plots (gnuplot).
"""
