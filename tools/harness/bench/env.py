"""The environment record: env.json, written in the VM, and what the host adds to it for the tables."""

import json
import os
import re
import subprocess

SYSFS = "/sys/class/infiniband"


def read(path, default=""):
    """PATH's text without its trailing newlines (as $(cat PATH) gives it), or DEFAULT."""
    try:
        with open(path, errors="replace") as f:
            return f.read().rstrip("\n")
    except OSError:
        return default


def output(argv):
    """ARGV's standard output without trailing newlines, "" when it cannot run or fails."""
    try:
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              check=False).stdout.rstrip("\n")
    except OSError:
        return ""


def roce_v2_gid(device, sysfs=SYSFS):
    """The lowest GID index of port 1 whose type is RoCE v2 and whose GID is IPv4-mapped; 1 if none."""
    port = os.path.join(sysfs, device, "ports", "1")
    try:
        indexes = sorted((int(i) for i in os.listdir(os.path.join(port, "gid_attrs", "types")) if i.isdigit()))
    except OSError:
        indexes = []
    for i in indexes:
        if (read(os.path.join(port, "gid_attrs", "types", str(i))) == "RoCE v2"
                and read(os.path.join(port, "gids", str(i))).startswith("0000:0000:0000:0000:0000:ffff:")):
            return i
    return 1


def dpkg_version(package):
    """The installed version of Debian package PACKAGE, "" if it is not installed."""
    return output(["dpkg-query", "-W", "-f=${Version}", package])


def first_field(text, pattern, field):
    """Word FIELD (from 0, split on whitespace) of the first line of TEXT that PATTERN matches, as awk's $N."""
    for line in text.splitlines():
        if re.search(pattern, line):
            parts = line.split()
            return parts[field] if len(parts) > field else ""
    return ""


def cpu_model(cpuinfo):
    """The first 'model name' of /proc/cpuinfo's text CPUINFO."""
    for line in cpuinfo.splitlines():
        if "model name" in line and ": " in line:
            return line.split(": ", 1)[1]
    return ""


def mem_total(meminfo):
    """MemTotal of /proc/meminfo's text MEMINFO, as "N kB"."""
    return " ".join(first_field(meminfo, "MemTotal", i) for i in (1, 2))


def record(path, opts, device, gid):
    """Write env.json at PATH: this machine (the VM), its device DEVICE and GID index GID, and OPTS."""
    meminfo = read("/proc/meminfo")
    uname = os.uname()
    env = {
        "kernel": uname.release,
        "machine": uname.machine,
        "route": os.environ.get("RDMACXX_SOFTROCE_ROUTE", ""),
        "nodes": os.environ.get("RDMACXX_NODES") or "1",
        "cpus": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model(read("/proc/cpuinfo")),
        "memory": mem_total(meminfo),
        "thp": read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "rdma_core": dpkg_version("rdma-core"),
        "libibverbs": dpkg_version("libibverbs1"),
        "perftest": dpkg_version("perftest"),
        "benchmark": dpkg_version("libbenchmark-dev"),
        "compiler": output(["c++", "--version"]).split("\n")[0],
        "device": device,
        "address": os.environ.get("RDMACXX_ADDR", ""),
        "active_mtu": first_field(output(["ibv_devinfo", "-d", device]), "active_mtu", 1),
        "gid_index": gid,
        "gid": read(os.path.join(SYSFS, device, "ports", "1", "gids", str(gid))),
        "reps": opts.reps, "passes": opts.passes, "min_time": opts.min_time, "sizes": opts.sizes,
        "h2h_reps": opts.h2h_reps, "quick": int(opts.quick), "reg_max": opts.reg_max,
    }
    write(path, env)
    return env


def write(path, env):
    """Write ENV to env.json at PATH (indented by 2, as ever)."""
    with open(path, "w") as f:
        json.dump(env, f, indent=2)


def set_reg_max(path, reg_max):
    """Record in env.json at PATH the largest registration actually tried."""
    with open(path) as f:
        env = json.load(f)
    env["reg_max"] = reg_max
    write(path, env)


def mem_kib():
    """This machine's memory in KiB (MemTotal)."""
    return int(first_field(read("/proc/meminfo"), "MemTotal", 1) or 0)


def for_tables(out, boot=False, host_cpus=None):
    """env.json of the run in OUT with the host's side added: its load before and after the device
    run, its CPU count (HOST_CPUS, default this host's), and with BOOT the VM boot time that
    tools/softroce printed (boot_s)."""
    with open(os.path.join(out, "env.json")) as f:
        env = json.load(f)
    runs = os.path.join(out, "runs")
    for when in ("before", "after"):  # the host's load average (QEMU shares the host's cores with everything else)
        path = os.path.join(runs, f"host-load-{when}.txt")
        if os.path.exists(path):
            env[f"host_load_{when}"] = read(path).strip()
    env["host_cpus"] = os.cpu_count() if host_cpus is None else host_cpus
    softroce = os.path.join(runs, "softroce.txt")
    if boot and os.path.exists(softroce):
        m = re.search(r"(\d+) nodes up in ([\d.]+) s", read(softroce))
        if m:
            env["boot_s"] = float(m.group(2))
    return env


def loadavg():
    """The host's load averages, the first three fields of /proc/loadavg, as one line."""
    return " ".join(read("/proc/loadavg").split()[:3]) + "\n"
