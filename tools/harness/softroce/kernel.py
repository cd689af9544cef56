"""The VM's boot files: Debian's kernel package (downloaded once), the kernel unpacked for a
PVH boot, and a busybox initramfs with the guest's modules and init; the cache that keeps
them, its lock and its pruning.

Cache layout ($CACHE: RDMACXX_SOFTROCE_CACHE, or /var/cache/rdmacxx/softroce):
  $CACHE/lock                               flock: every run holds it shared; pruning takes
                                            it exclusively, and only when nobody else runs
  $CACHE/kernels/KVER/*.deb                 the kernel package
  $CACHE/kernels/KVER/boot-HASH/kernel      the kernel (the ELF image, when it unpacks)
  $CACHE/kernels/KVER/boot-HASH/initrd.img  busybox + modules + the guest init; HASH covers
                                            the guest files, the module list, busybox and
                                            the code that unpacks and builds
  $CACHE/runs/run.XXXXXX/                   one run's files (see vm.py)
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import glob
import gzip
import hashlib
import inspect
import lzma
import os
import re
import shutil
import struct
import subprocess
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from .common import (APT, SIGNALS, Deadline, SetupError, have, is_root, make_temp_dir, need,
                     need_package, output, say, want_rxe_provider)

GUEST_DIR = Path(__file__).resolve().parent / "guest"

# Modules the guest needs, in load order (each with its dependency chain).
# crc32_generic must come before rdma_rxe: rxe asks the crypto API for "crc32" when a
# device is added, and the guest has no modprobe to load it on demand.
# sch_netem: packet loss and delay on a node's eth0 (tc qdisc ... netem) for fault tests.
# ib_umad: the MAD interface (/dev/infiniband/umadN) for rdmacxx/mad.hpp.
# vgem: a software DRM device (/dev/dri/card0) whose buffers export as real dma-bufs, for the
# DMA-BUF registration tests (Debian's 6.1 kernel is built without CONFIG_UDMABUF).
GUEST_MODULES = ("crc32_generic virtio_pci 9pnet_virtio 9p rdma_rxe rdma_ucm ib_umad dummy "
                 "virtio_net sch_netem vgem").split()

RUNS_KEPT_SECONDS = 24 * 3600  # pruning removes run folders older than this


@dataclasses.dataclass
class BootFiles:
    """What QEMU boots, and the cache they are in (runs go to cache/runs)."""

    cache: Path
    kver: str
    kernel: Path
    initrd: Path


def cache_dir() -> Path:
    """The cache folder, created; a plain path outside /tmp."""
    env = os.environ.get("RDMACXX_SOFTROCE_CACHE", "")
    path = Path(env or "/var/cache/rdmacxx/softroce")
    if not env and not is_root():
        try:
            path.mkdir(parents=True, exist_ok=True)
            writable = os.access(path, os.W_OK)
        except OSError:
            writable = False
        if not writable:
            xdg = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
            path = Path(xdg) / "rdmacxx" / "softroce"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SetupError(f"cannot create the cache folder {path}") from e
    real = os.path.realpath(path)
    # The run folder's path goes on the kernel command line, and the guest's /tmp is new.
    if not re.fullmatch(r"/[A-Za-z0-9._/+-]+", real):
        raise SetupError(f"cache folder '{real}' must be a plain path (no spaces or quotes): "
                         "set RDMACXX_SOFTROCE_CACHE")
    if real.startswith("/tmp/"):
        raise SetupError(f"cache folder {real} is under /tmp, which the VM replaces with a "
                         "fresh tmpfs: set RDMACXX_SOFTROCE_CACHE elsewhere")
    return Path(real)


class CacheLock:
    """$CACHE/lock, flock(2) as flock(1) takes it: shared for as long as the run lasts;
    exclusive only to prune, and only when nobody else holds it."""

    def __init__(self, cache: Path) -> None:
        self.fd = os.open(cache / "lock", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                          0o666)
        fcntl.flock(self.fd, fcntl.LOCK_SH)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[bool]:
        """Yields whether the lock became exclusive (without waiting); shared again after."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # flock(2) converts by unlocking first: make sure we hold it shared again.
            fcntl.flock(self.fd, fcntl.LOCK_SH)
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_SH)

    def close(self) -> None:
        os.close(self.fd)


def kernel_package() -> str:
    """Debian's kernel package, the one linux-image-amd64 depends on, or ""."""
    def depends() -> str:
        for line in output(["apt-cache", "depends", "linux-image-amd64"]).splitlines():
            words = line.split()
            if len(words) > 1 and words[0] == "Depends:" and re.match(r"linux-image-[0-9]",
                                                                        words[1]):
                return words[1]
        return ""
    return depends() or (APT.update() and depends()) or ""


def guest_modules(tree: Path, kver: str) -> list[str]:
    """"path.ko [params]" lines: the guest modules' dependency chains in load order, each
    module once ("builtin" ones left out)."""
    for base in (tree, tree / "usr"):
        if (base / "lib/modules" / kver).is_dir():
            break
    else:
        raise SetupError(f"the kernel package has no lib/modules/{kver}")
    # Debian's package ships no modules.dep: depmod makes it.
    if subprocess.run(["depmod", "-b", str(base), kver], check=False).returncode != 0:
        raise SetupError(f"depmod -b {base} {kver} failed")
    lines: list[str] = []
    seen: set[str] = set()
    for module in GUEST_MODULES:
        # -C /dev/null: ignore this host's /etc/modprobe.d options.
        result = subprocess.run(["modprobe", "-C", "/dev/null", "-d", str(base), "-S", kver,
                                 "--show-depends", module], stdout=subprocess.PIPE, text=True,
                                check=False)
        if result.returncode != 0:
            raise SetupError(f"modprobe --show-depends {module}: the kernel {kver} lacks "
                             f"module {module}")
        for line in result.stdout.splitlines():
            words = line.split()
            if len(words) > 1 and words[0] == "insmod" and words[1] not in seen:
                seen.add(words[1])
                lines.append(" ".join(words[1:]))
    return lines


def unpack_kernel(vmlinuz: Path, config: Path, out: Path) -> None:
    """The kernel QEMU is to boot. Debian's vmlinuz decompresses itself (xz), which takes
    seconds under TCG; a kernel built with CONFIG_PVH=y boots straight from its ELF image,
    so that is unpacked here, once. The payload's place is in the bzImage header (boot
    protocol 2.08+); xz and zstd payloads end with a 4-byte size. Anything unexpected: OUT
    is the vmlinuz as it is."""
    image = vmlinuz.read_bytes()
    out.write_bytes(image)
    try:
        if "CONFIG_PVH=y" not in config.read_text(errors="replace").splitlines():
            return
    except OSError:
        return
    setup_sects = image[0x1F1] or 4
    offset = struct.unpack_from("<I", image, 0x248)[0] + (setup_sects + 1) * 512
    length = struct.unpack_from("<I", image, 0x24C)[0]
    payload = image[offset:offset + length]
    elf = b""
    try:
        if payload.startswith(b"\xfd7zX"):
            elf = lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(payload[:-4])
        elif payload.startswith(b"\x28\xb5\x2f\xfd"):
            if have("zstd"):
                elf = subprocess.run(["zstd", "-qdc"], input=payload[:-4], capture_output=True,
                                     check=False).stdout
        elif payload.startswith(b"\x1f\x8b"):
            elf = zlib.decompressobj(wbits=31).decompress(payload)
    except (lzma.LZMAError, zlib.error):
        elf = b""
    if elf.startswith(b"\x7fELF"):
        out.write_bytes(elf)


def build_initrd(tree: Path, kver: str, work: Path, out: Path) -> None:
    """The initramfs: busybox, the guest modules (decompressed), the guest init as /init."""
    stage = work / "initramfs"
    for sub in ("bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "mnt",
                "lib/modules"):
        (stage / sub).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shutil.which("busybox") or "busybox", stage / "bin/busybox")
    shutil.copyfile(GUEST_DIR / "init.sh", stage / "init")
    (stage / "init").chmod(0o755)
    (stage / "bin/busybox").chmod(0o755)
    load = []
    for line in guest_modules(tree, kver):
        path, _, params = line.partition(" ")
        name = os.path.basename(path)
        data = Path(path).read_bytes()
        if name.endswith(".ko.xz"):
            data = lzma.decompress(data)
        elif name.endswith(".ko.gz"):
            data = gzip.decompress(data)
        elif name.endswith(".ko.zst"):
            need("zstd", "zstd")
            data = subprocess.run(["zstd", "-qdc", path], capture_output=True, check=True).stdout
        elif not name.endswith(".ko"):
            raise SetupError(f"unexpected module file {path}")
        name = name.removesuffix(".xz").removesuffix(".gz").removesuffix(".zst")
        (stage / "lib/modules" / name).write_bytes(data)
        load.append(f"{name} {params}\n")
    (stage / "modules.load").write_text("".join(load))
    names = sorted(["."] + [f"./{p.relative_to(stage)}" for p in stage.rglob("*")])
    archive = subprocess.run(["cpio", "--null", "-o", "-H", "newc", "-R", "0:0", "--quiet"],
                             input="".join(n + "\0" for n in names).encode(), cwd=stage,
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise SetupError(f"cpio failed: {archive.stderr.decode(errors='replace').strip()}")
    with gzip.open(out, "wb", compresslevel=1) as f:
        f.write(archive.stdout)


def boot_hash(kver: str) -> str:
    """16 hex digits over what the boot files are made of: the guest files (init, ssh
    configuration), the module list, busybox's version and the code that builds them."""
    h = hashlib.sha256()
    h.update(f"softroce-boot-v3\n{kver}\n{' '.join(GUEST_MODULES)}\n".encode())
    for function in (unpack_kernel, build_initrd):
        h.update(inspect.getsource(function).encode())
    h.update(output(["dpkg-query", "-W", "-f", "${Version}\n", "busybox-static"]).encode())
    for path in sorted(GUEST_DIR.iterdir()):
        h.update(f"\n{path.name}\n".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def download(package: str, folder: Path, deadline: Deadline) -> Path:
    """apt-get download of that exact name (a glob would fetch every version there is)."""
    say(f"apt-get download {package}")
    log = folder / "apt.log"
    for attempt in (1, 2):
        with open(log, "wb") as f:
            result = subprocess.run(["timeout", str(deadline.left()), "apt-get", "download",
                                     "-q", package], cwd=folder, stdout=f,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    check=False)
        if result.returncode == 0:
            debs = sorted(glob.glob(f"{glob.escape(str(folder))}/{package}_*.deb"))
            if debs:
                return Path(debs[0])
        deadline.check(f"downloading {package}")
        if attempt == 2 or not APT.update():  # a stale package list: update once
            break
    os.write(2, log.read_bytes())
    raise SetupError(f"apt-get download {package} failed")


def _cached_kver(cache: Path) -> str:
    """The newest kernel version with a package in the cache, or ""."""
    kvers = {deb.parent.name for deb in (cache / "kernels").glob("*/linux-image-*.deb")}

    def version_key(kver: str) -> list:
        return [(0, int(part), "") if part.isdigit() else (1, 0, part)
                for part in re.split(r"(\d+)", kver) if part]
    return max(kvers, key=version_key, default="")


def _build(deb_pattern: str, package: str, kdir: Path, kver: str, boot: Path,
           deadline: Deadline) -> Path:
    """Makes BOOT (kernel, initrd.img) from the kernel package, downloading it when the
    cache lacks it; returns the package's path."""
    tmp = make_temp_dir(kdir, "tmp.")
    try:
        debs = sorted(kdir.glob(deb_pattern))
        if debs:
            deb = debs[-1]
        else:
            fetched = download(package, tmp, deadline)
            deb = kdir / fetched.name
            os.replace(fetched, deb)
        if subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp / "root")],
                          check=False).returncode != 0:
            raise SetupError(f"dpkg-deb -x {deb} failed")
        vmlinuz = tmp / "root/boot" / f"vmlinuz-{kver}"
        if not vmlinuz.is_file():
            raise SetupError(f"{deb} has no boot/vmlinuz-{kver}")
        (tmp / "boot").mkdir()
        unpack_kernel(vmlinuz, tmp / "root/boot" / f"config-{kver}", tmp / "boot/kernel")
        build_initrd(tmp / "root", kver, tmp, tmp / "boot/initrd.img")
        # Atomic: a run racing us may have put the same files there first, which is as good.
        with contextlib.suppress(OSError):
            os.rename(tmp / "boot", boot)
        return deb
    finally:
        with SIGNALS.deferred():
            shutil.rmtree(tmp, ignore_errors=True)


def prune(lock: CacheLock, cache: Path, kver: str, keep: set[str]) -> None:
    """Removes other kernels and boot files (KEEP: the names kept in the kernel's folder)
    and day-old run folders, but only when no other run is using the cache."""
    with lock.exclusive() as alone:
        if not alone:
            return
        kdir = cache / "kernels" / kver
        for path in kdir.iterdir():
            if path.name not in keep:
                _remove(path)
        for path in (cache / "kernels").iterdir():
            if path.name != kver:
                _remove(path)
        now = time.time()
        for path in (cache / "runs").iterdir():
            with contextlib.suppress(OSError):
                if now - path.lstat().st_mtime > RUNS_KEPT_SECONDS:
                    _remove(path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def check_tools() -> None:
    """The programs the vm route runs, installed when we may."""
    for command, package in (("qemu-system-x86_64", "qemu-system-x86"),
                             ("busybox", "busybox-static")):
        need(command, package)
    need_package("busybox-static")  # a dynamic busybox would need a libc in the initramfs
    for command, package in (("cpio", "cpio"), ("depmod", "kmod"), ("modprobe", "kmod"),
                             ("dpkg-deb", "dpkg"), ("apt-get", "apt"),
                             ("setpriv", "util-linux"), ("ip", "iproute2"),
                             ("rdma", "iproute2"), ("timeout", "coreutils")):
        need(command, package)
    want_rxe_provider()
    arch = output(["dpkg", "--print-architecture"]).strip()
    if arch != "amd64":
        raise SetupError("route vm: only amd64 hosts are supported")


@contextlib.contextmanager
def prepare(deadline: Deadline) -> Iterator[BootFiles]:
    """The boot files, fetched and built when the cache lacks them; the cache's lock is held
    shared until the block ends."""
    check_tools()
    cache = cache_dir()
    (cache / "kernels").mkdir(exist_ok=True)
    (cache / "runs").mkdir(exist_ok=True)
    lock = CacheLock(cache)
    try:
        package = kernel_package()
        if package:
            kver = package.removeprefix("linux-image-")
        else:
            # Offline and not root: fall back on the newest kernel already in the cache.
            kver = _cached_kver(cache)
            if not kver:
                raise SetupError("cannot tell Debian's kernel package: 'apt-cache depends "
                                 "linux-image-amd64' names none (run apt-get update)")
            say(f"apt-cache names no kernel; using the cached {kver}")
            package = f"linux-image-{kver}"
        kdir = cache / "kernels" / kver
        kdir.mkdir(exist_ok=True)
        digest = boot_hash(kver)
        boot = kdir / f"boot-{digest}"
        files = BootFiles(cache, kver, boot / "kernel", boot / "initrd.img")
        if not (files.kernel.is_file() and files.initrd.is_file()):
            say(f"preparing the VM (kernel {kver}, boot files {digest}): once per kernel and "
                "script version")
            deb = _build(f"{glob.escape(package)}_*.deb", package, kdir, kver, boot, deadline)
            if not (files.kernel.is_file() and files.initrd.is_file()):
                raise SetupError(f"could not build {boot}")
            prune(lock, cache, kver, {boot.name, deb.name})
        yield files
    finally:
        lock.close()
