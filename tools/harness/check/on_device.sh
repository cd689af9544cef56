#!/usr/bin/env bash
# on_device.sh — the device suite of tools/check, run by tools/softroce where an RDMA device
# exists (a VM on a host without one): one boot runs every device program.
#
# Usage (from tools/check): tools/softroce -- bash tools/harness/check/on_device.sh LOGS CONSUMERS [PART]
#
# PART (default all): g++ runs what needs only the g++ build (its device, no-heap and Asio tests,
# the examples, the rdmacxx-perf smoke and its instruction counts); others runs the rest (the
# ASan+UBSan device tests, bench-asio, the consumers' programs, the g++ -O3 and clang++ counts), so
# that a full tools/check can start the first while the other builds are still being made.
#
# The doctest programs run through `meson test` (suite device of the g++ build, the test named
# device of the ASan+UBSan build; logs meson-logs/device.json in each build); every other
# program writes LOGS/NAME.log and LOGS/NAME.status. Environment: CHECK_BUILDS (the builds that
# exist: gcc, clang, asan, release), RDMACXX_DEVICE and RDMACXX_ADDR (set by tools/softroce).
set -u
logs=${1:?usage: on_device.sh LOGS CONSUMERS}
consumers=${2:?usage: on_device.sh LOGS CONSUMERS}
part=${3:-all}
builds=" ${CHECK_BUILDS:-gcc} "
build="build-check-gcc"
has() { [[ "$builds" == *" $1 "* ]]; }
first() { [ "$part" != others ]; }
second() { [ "$part" != g++ ]; }

# example NAME COMMAND...: runs one program, its output in NAME.log and its status in NAME.status.
example() {
  local name=$1
  shift
  "$@" >"$logs/$name.log" 2>&1
  echo $? >"$logs/$name.status"
}
# server_client NAME DELAY SERVER... -- CLIENT...: SERVER in the background, CLIENT DELAY seconds
# later, each bounded by 300 s; both must succeed. A DELAY that is not a number is a line the
# server prints when it is ready: the client starts once the log has it (at most 120 s).
# shellcheck disable=SC2094 # the log is read for that line while the pair writes it
server_client() {
  local name=$1 delay=$2 server=() c s k
  shift 2
  while [ "$1" != -- ]; do
    server+=("$1")
    shift
  done
  shift
  {
    timeout 300 "${server[@]}" &
    if [[ $delay =~ ^[0-9.]+$ ]]; then
      sleep "$delay"
    else
      for ((k = 0; k < 1200; k++)); do
        grep -qF -- "$delay" "$logs/$name.log" 2>/dev/null && break
        sleep 0.1
      done
    fi
    timeout 300 "$@"
    c=$?
    wait $!
    s=$?
    [ $c -eq 0 ] && [ $s -eq 0 ]
  } >"$logs/$name.log" 2>&1
  echo $? >"$logs/$name.status"
}
# pair NAME PROGRAM ARGS...: rdma-core's style of example, server and client of PROGRAM with ARGS,
# the client given the server's address last.
pair() {
  local name=$1 prog=$2
  shift 2
  server_client "$name" 0.5 "$prog" "$@" -- "$prog" "$@" "$RDMACXX_ADDR"
}
# perf_pair NAME PORT TEST ARGS...: rdmacxx-perf (benchmarks/perf), server and client as two
# processes, --json; both must succeed and the client's JSON must hold the test's figures.
perf_pair() {
  local name=$1 port=$2 test=$3 c s
  shift 3
  {
    timeout 120 "$build/benchmarks/perf/rdmacxx-perf" "$test" -p "$port" --json "$@" &
    sleep 0.5
    timeout 120 "$build/benchmarks/perf/rdmacxx-perf" "$test" -p "$port" --json "$@" "$RDMACXX_ADDR" \
      >"$logs/$name.json"
    c=$?
    wait $!
    s=$?
    cat "$logs/$name.json"
    [ $c -eq 0 ] && [ $s -eq 0 ] && /usr/bin/python3 tools/harness/check/perf_json.py "$logs/$name.json" "$test"
  } >"$logs/$name.log" 2>&1
  echo $? >"$logs/$name.status"
}
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tools/lsan.supp
# The doctest programs one at a time (rxe can drop completions when many QPs run at once): the
# g++ build's device, alloc and asio tests, then the ASan+UBSan build's device tests. The clang++
# build compiles them with -Werror and runs its instruction counts below.
if first; then
  meson test -C "$build" --no-rebuild --num-processes 1 --logbase device --suite device \
    >"$logs/meson-device-gcc.log" 2>&1
  pair rc_pingpong "$build/examples/rc_pingpong" -n 200 -s 4096
  pair rc_pingpong_events "$build/examples/rc_pingpong" -e -n 200 -s 65536
  pair uc_pingpong "$build/examples/uc_pingpong" -n 200 -s 4096
  pair ud_pingpong_events "$build/examples/ud_pingpong" -e -n 200 -s 1024
  pair srq_pingpong "$build/examples/srq_pingpong" -q 4 -n 200 -s 4096
  # In the background, beside the CM examples (their own ports; no figure is asserted).
  {
    perf_pair rdmacxx_perf_send_lat 18621 send_lat -n 300 -s 64
    perf_pair rdmacxx_perf_write_bw 18622 write_bw -n 400 -s 4096
  } &
  server_client cm_server_client 0.5 "$build/examples/cm_server" -n 100 -S 4096 -- \
    "$build/examples/cm_client" -s "$RDMACXX_ADDR" -n 100 -S 4096
  server_client cm_server_client_events 0.5 "$build/examples/cm_server" -e -- \
    "$build/examples/cm_client" -e -s "$RDMACXX_ADDR"
  server_client cm_ud 0.5 "$build/examples/cm_ud" -b "$RDMACXX_ADDR" -C 20 -S 512 -- \
    "$build/examples/cm_ud" -s "$RDMACXX_ADDR" -C 20 -S 512
  server_client mckey "mckey: receiving" "$build/examples/mckey" -b "$RDMACXX_ADDR" -C 20 -S 200 -- \
    "$build/examples/mckey" -b "$RDMACXX_ADDR" -s -C 20 -S 200
  example epoll_server "$build/examples/epoll_server" -c 4 -n 200
  # One listener, PD, registered buffer, SRQ and CQ on one completion channel for 32 clients,
  # then 20 connect/disconnect cycles (tests/device/cm_scale_test.cpp runs 300 and checks
  # resources flat).
  example cm_shared_server "$build/examples/cm_shared_server" -b "$RDMACXX_ADDR" -c 32 -n 100 -r 20
  # mpi_pingpong's echo side on one node, 20,000 event-driven round trips: its echo's send
  # completion may come after the next ping's receive (rxe completes them in separate tasks);
  # a receive completion dropped there left both ranks waiting 60 s and aborting (tools/demo).
  [ -x "$build/examples/mpi_pingpong" ] &&
    example mpi_pingpong_one_node timeout 300 mpirun --allow-run-as-root -np 2 --oversubscribe --mca pml ob1 \
      --mca btl self,tcp "$build/examples/mpi_pingpong" -e -n 20000 -s 4096
  # The Asio adapter's coroutine programs (built when Meson finds standalone Asio): 16 CM
  # clients, each one coroutine, against an echo server on one PD, MR, SRQ and CQ, all on one
  # io_context; and 8 coroutines keeping RDMA READs in flight over 1 MiB, twice, every byte
  # checked, each READ bounded by a timer.
  [ -x "$build/examples/asio_echo_server" ] &&
    example asio_echo_server timeout 300 "$build/examples/asio_echo_server" -b "$RDMACXX_ADDR" -c 16 -n 100
  [ -x "$build/examples/asio_read_client" ] &&
    example asio_read_client timeout 300 "$build/examples/asio_read_client" -b "$RDMACXX_ADDR" \
      -S 1048576 -s 4096 -q 8 -r 2
  # The same with the server's QP moved to ERR before chunk 100 (a dead peer): a READ must time
  # out after its 200 ms bound, and every READ be reaped before the buffers go.
  [ -x "$build/examples/asio_read_client" ] &&
    example asio_read_client_timeout timeout 300 "$build/examples/asio_read_client" -b "$RDMACXX_ADDR" \
      -S 1048576 -s 4096 -q 8 -r 1 -T 200 -K 100
  # Management datagrams (built when Meson finds libibumad): RPCs to this node's own link-local
  # GID, a ping class and a test SA served by threads of the same program, and two RC QPs of it
  # connected by a PathRecord from that SA (tests/multinode/mad_test.cpp).
  [ -x "$build/tests/mad_test" ] && example mad_loopback timeout 300 "$build/tests/mad_test" -tc='mad loopback'
  # mad_ping, responder and requester, to this node's own link-local GID.
  [ -x "$build/examples/mad_ping" ] && server_client mad_ping 3 "$build/examples/mad_ping" -S -c 10 -- \
    "$build/examples/mad_ping" -c 10 "$(cat "/sys/class/infiniband/$RDMACXX_DEVICE/ports/1/gids/0")"
  # The MPI tests and examples run across nodes (the nodes suite).
  example devinfo "$build/examples/devinfo" -v
  example end_port "$build/examples/end_port" "$RDMACXX_DEVICE/1"
  wait
fi
if second; then
  # With Asio, the adapter's cancellation race and lifetime tests too (asio-race).
  asan_tests=(device)
  [ -x build-check-asan/tests/asio_race_tests ] && asan_tests+=(asio-race)
  has asan && meson test -C build-check-asan --no-rebuild --num-processes 1 --logbase device "${asan_tests[@]}" \
    >"$logs/meson-device-asan.log" 2>&1
  # bench-asio once, smoke-sized (no figure is asserted): it exits non-zero when a row fails. It
  # is built by the release build only (when Meson finds Asio); missing there, it fails.
  has release && example bench_asio timeout 300 build-check-release/benchmarks/bench-asio \
    --benchmark_min_time=0.001
  for c in "$consumers"/bin/*; do
    [ -x "$c" ] && example "consumer_$(basename "$c")" "$c" "$(basename "$c")"
  done
fi
# The instruction counts (two side by side when both run: the VM has two CPUs): callgrind counts
# instructions, not time, and the empty polls a busier CPU adds are taken out by their own count.
# g++ -O3 (users' release builds) and clang++ -O2 within the same +2 as g++ -O2; the extended CQ's
# poll (completion_queue_ex) within raw + 0 under all three (INSTRUCTION_EX_ALLOWANCE).
first && example instruction_counts tools/instruction-counts "$build"
if second; then
  has release && example instruction_counts_O3 tools/instruction-counts build-check-release &
  has clang && example instruction_counts_clang tools/instruction-counts build-check-clang &
  wait
fi
