#!/bin/busybox sh
# shellcheck shell=dash # busybox ash, checked as dash
# PID 1 of a softroce VM. Never run this anywhere else (it sets the clock).
#
# tools/softroce puts this file into the VM's initramfs as /init (busybox sh; the initramfs
# hash covers it, so an edit rebuilds the initramfs on the next run). It reads the run folder
# from the kernel command line (softroce_run=) and everything else from $run/params (or
# $run/params.K for node K of several) on the 9p share: NONCE, NODE, NODES, NODE_NAME,
# NODE_ADDR, NODE_PREFIX, NETDEV, DEVICE, RAILS, RAIL_NETDEVS, RAIL_ADDRS,
# KEEP_TMP, RUN_UID, RUN_GID, RUN_GROUPS, HOST_RDMA,
# HOST_SETPRIV, HOST_ENV, HOST_BASH, and with several nodes HOST_SSHD and HIDE_BASHRC.
# shellcheck disable=SC2153 # those upper-case names come from the params file
[ "$$" = 1 ] || { echo "softroce init: not PID 1, refusing to run" >&2; exit 1; }
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys

stop() { sync; poweroff -f; reboot -f; echo o >/proc/sysrq-trigger; sleep 60; }
fail() { echo "softroce-vm: $*"; stop; }

run='' epoch='' verbose='' node=''
read -r cmdline </proc/cmdline
for arg in $cmdline; do
  case $arg in
    softroce_run=*) run=${arg#*=} ;;
    softroce_node=*) node=${arg#*=} ;;
    softroce_epoch=*) epoch=${arg#*=} ;;
    softroce_verbose=1) verbose=1 ;;
  esac
done
# With --verbose, each step with the seconds since boot.
step() { [ -z "$verbose" ] || echo "softroce-vm: $(cut -d' ' -f1 /proc/uptime) $*"; }
step "init started"
[ -n "$epoch" ] && date -s "@$epoch" >/dev/null
[ -n "$run" ] || fail "no softroce_run= on the kernel command line"

while read -r mod args; do
  # shellcheck disable=SC2086 # the module's parameters, one word each
  insmod "/lib/modules/$mod" $args || fail "insmod $mod failed"
done </modules.load
step "modules loaded"

r=/mnt
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=mmap hostroot $r ||
  fail "cannot mount the host's / over 9p"
# One node: $run/params; node K of several: $run/params.K.
params=$r$run/params${node:+.$node}
[ -r "$params" ] || fail "no $params on the share"
# shellcheck source=/dev/null
. "$params"
step "host / mounted"

# The host's clock, to the second: the mtime the host gives a file we create on the share.
touch "$r$run/clock" && now=$(stat -c %Y "$r$run/clock") && date -s "@$now" >/dev/null

# The chroot: the host's / with the guest's own kernel file systems.
mount -t proc proc $r/proc
mount -t sysfs sysfs $r/sys
mount -t configfs configfs $r/sys/kernel/config 2>/dev/null
mount -t devtmpfs devtmpfs $r/dev
mkdir -p $r/dev/pts $r/dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts $r/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $r/dev/shm
[ -e $r/dev/fd ] || ln -s /proc/self/fd $r/dev/fd
[ -e $r/dev/stdin ] || ln -s /proc/self/fd/0 $r/dev/stdin
[ -e $r/dev/stdout ] || ln -s /proc/self/fd/1 $r/dev/stdout
[ -e $r/dev/stderr ] || ln -s /proc/self/fd/2 $r/dev/stderr
# A fresh /tmp; KEEP_TMP (the caller's folder under /tmp, if any) is bound in from the host.
if [ -n "$KEEP_TMP" ]; then
  mkdir -p /hosttmp && mount -o bind $r/tmp /hosttmp
fi
mount -t tmpfs -o mode=1777 tmpfs $r/tmp
if [ -n "$KEEP_TMP" ]; then
  { mkdir -p "$r$KEEP_TMP" && mount -o bind "/hosttmp${KEEP_TMP#/tmp}" "$r$KEEP_TMP"; } ||
    fail "cannot bind $KEEP_TMP from the host"
fi

step "chroot ready"
# The network: loopback, and the node's interface on each rail (a dummy one, or ethR between
# VMs) with its Soft-RoCE device rxeR: RAIL_NETDEVS and RAIL_ADDRS name them, rail 0 first
# (NETDEV, DEVICE, NODE_ADDR). busybox's ip: the host's one would be loaded over 9p each time.
hostname "$NODE_NAME"
ip link set lo up
# shellcheck disable=SC2086 # the addresses, one word each
set -- $RAIL_ADDRS
uverbs=0
for netdev in $RAIL_NETDEVS; do
  addr=$1
  shift
  dev=rxe$uverbs
  case $netdev in
    eth*) ;;
    *) ip link add "$netdev" type dummy || fail "cannot add dummy interface $netdev" ;;
  esac
  ip addr add "$addr/$NODE_PREFIX" dev "$netdev" || fail "cannot give $netdev $addr"
  ip link set "$netdev" up || fail "cannot bring $netdev up"
  chroot $r "$HOST_RDMA" link add "$dev" type rxe netdev "$netdev" ||
    fail "rdma link add $dev type rxe netdev $netdev failed"
  # Wait (5 s at most) until the RoCE v2 GID of the address is in the GID table.
  i=0
  while [ $i -lt 50 ] && ! grep -qv '^0000:0000:0000:0000:0000:0000:0000:0000$' \
    "/sys/class/infiniband/$dev/ports/1/gids/1" 2>/dev/null; do
    sleep 0.1; i=$((i + 1))
  done
  [ -e $r/dev/infiniband/uverbs$uverbs ] || fail "no /dev/infiniband/uverbs$uverbs"
  step "$dev ready on $netdev"
  uverbs=$((uverbs + 1))
done

# Registration pins memory.
# shellcheck disable=SC3045 # busybox sh has ulimit -l
ulimit -l unlimited

# Several nodes: a private /run (sshd's privilege separation folder), /etc/hosts naming the
# nodes (bound over the host's file in this VM only), and sshd with the run's own keys and
# configuration. Node 1 waits until every node is up; the others stay up until the host
# stops them.
if [ "${NODES:-1}" -gt 1 ]; then
  { mount -t tmpfs -o mode=0755 tmpfs $r/run && mkdir -m 0755 $r/run/sshd &&
    mkdir -m 1777 $r/run/lock; } || fail "cannot mount a fresh /run"
  mount -o bind "$r$run/hosts" $r/etc/hosts || fail "cannot bind $run/hosts over /etc/hosts"
  # The shell sshd starts for a command reads ~/.bashrc, which can take tens of seconds
  # under emulation (pyenv init and the like): an empty file hides it in this VM only.
  if [ -n "$HIDE_BASHRC" ] && [ -f "$r$HIDE_BASHRC" ]; then
    mount -o bind "$r$run/empty" "$r$HIDE_BASHRC" || fail "cannot hide $HIDE_BASHRC"
  fi
  chroot $r "$HOST_SSHD" -f "$run/ssh/sshd_config.$NODE" -E "$run/sshd.$NODE.log" ||
    fail "sshd did not start (see $run/sshd.$NODE.log)"
  step "sshd started"
  touch "$r$run/ready.$NODE"
  if [ "$NODE" != 1 ]; then
    echo "@@softroce:$NONCE:ready@@"
    while :; do sleep 3600; done
  fi
  i=0
  while :; do
    up=1
    for k in $(seq 2 "$NODES"); do [ -e "$r$run/ready.$k" ] || up=; done
    [ -n "$up" ] && break
    [ $i -lt 3000 ] || fail "the other nodes did not come up within 300 s"
    sleep 0.1; i=$((i + 1))
  done
  step "all $NODES nodes up"
fi
# Drop to the caller's uid and groups when the caller was not root.
as_caller=
if [ "$RUN_UID" != 0 ]; then
  as_caller="$HOST_SETPRIV --reuid=$RUN_UID --regid=$RUN_GID --groups=$RUN_GROUPS --"
fi

stty -F /dev/console -onlcr 2>/dev/null
echo "@@softroce:$NONCE:begin@@"
{
  # shellcheck disable=SC2086 # as_caller is a command prefix, several words or none
  chroot $r $as_caller "$HOST_ENV" -i "$HOST_BASH" "$run/cmd.sh" </dev/null
  echo $? >"$r$run/status"
} 2>&1 | cat
step "command done"
sync
echo "@@softroce:$NONCE:end:$(cat "$r$run/status" 2>/dev/null)@@"
stop
