"""The boot files' cache: kernel unpacking, the lock protocol, pruning, the boot hash and the
cache folder's checks (no download, no VM)."""

from __future__ import annotations

import fcntl
import gzip
import lzma
import os
import shutil
import struct
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

from harness.softroce import kernel
from harness.softroce.common import SetupError

ELF = b"\x7fELF" + bytes(60)


def bzimage(payload: bytes) -> bytes:
    """A bzImage-shaped file: setup_sects at 0x1f1, payload_offset and payload_length at
    0x248 and 0x24c (boot protocol 2.08+), the payload after the setup sectors."""
    setup_sects = 2
    head = bytearray((setup_sects + 1) * 512)
    head[0x1F1] = setup_sects
    struct.pack_into("<II", head, 0x248, 16, len(payload))
    return bytes(head) + bytes(16) + payload + b"tail"


class UnpackKernel(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.tmp)
        (self.tmp / "config").write_text("CONFIG_X=y\nCONFIG_PVH=y\n")

    def unpack(self, image: bytes, config: str = "config") -> bytes:
        (self.tmp / "vmlinuz").write_bytes(image)
        kernel.unpack_kernel(self.tmp / "vmlinuz", self.tmp / config, self.tmp / "out")
        return (self.tmp / "out").read_bytes()

    def test_xz_payload(self) -> None:
        payload = lzma.compress(ELF, lzma.FORMAT_XZ) + struct.pack("<I", len(ELF))
        self.assertEqual(self.unpack(bzimage(payload)), ELF)

    def test_gzip_payload(self) -> None:
        self.assertEqual(self.unpack(bzimage(gzip.compress(ELF))), ELF)

    def test_without_pvh_the_image_is_kept(self) -> None:
        image = bzimage(gzip.compress(ELF))
        (self.tmp / "nopvh").write_text("CONFIG_PVH=n\n")
        self.assertEqual(self.unpack(image, "nopvh"), image)
        self.assertEqual(self.unpack(image, "missing"), image)

    def test_unknown_or_broken_payload_keeps_the_image(self) -> None:
        for payload in (b"LZ4!" + bytes(40), b"\xfd7zXZ\0broken", gzip.compress(b"not an ELF")):
            image = bzimage(payload)
            self.assertEqual(self.unpack(image), image)


class Cache(unittest.TestCase):
    def setUp(self) -> None:
        self.cache = Path(tempfile.mkdtemp(dir="/var/tmp"))
        self.addCleanup(shutil.rmtree, self.cache)

    def test_lock_protocol(self) -> None:
        first, second = kernel.CacheLock(self.cache), kernel.CacheLock(self.cache)
        self.addCleanup(first.close)
        with first.exclusive() as alone:
            self.assertFalse(alone)  # another run holds it shared
        second.close()
        with first.exclusive() as alone:
            self.assertTrue(alone)
            other = os.open(self.cache / "lock", os.O_RDONLY)
            self.addCleanup(os.close, other)
            with self.assertRaises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared again: others may run

    def make_tree(self) -> None:
        k = "kernels/6.1.0-1-amd64"
        for path in (f"{k}/boot-old/kernel", f"{k}/boot-new/kernel",
                     f"{k}/linux-image-6.1.0-1-amd64_1_amd64.deb", f"{k}/tmp.abcdef/x",
                     "kernels/5.10.0-9-amd64/old.deb",
                     "runs/run.recent/params", "runs/run.stale/params"):
            (self.cache / path).parent.mkdir(parents=True, exist_ok=True)
            (self.cache / path).write_text("")
        old = time.time() - 2 * 86400
        os.utime(self.cache / "runs/run.stale", (old, old))

    def test_prune_when_alone(self) -> None:
        self.make_tree()
        lock = kernel.CacheLock(self.cache)
        self.addCleanup(lock.close)
        kernel.prune(lock, self.cache, "6.1.0-1-amd64",
                     {"boot-new", "linux-image-6.1.0-1-amd64_1_amd64.deb"})
        self.assertEqual(sorted(str(p.relative_to(self.cache)) for p in self.cache.rglob("*")
                                if p.is_file()),
                         ["kernels/6.1.0-1-amd64/boot-new/kernel",
                          "kernels/6.1.0-1-amd64/linux-image-6.1.0-1-amd64_1_amd64.deb", "lock",
                          "runs/run.recent/params"])

    def test_no_pruning_while_another_run_holds_the_lock(self) -> None:
        self.make_tree()
        lock, other = kernel.CacheLock(self.cache), kernel.CacheLock(self.cache)
        self.addCleanup(lock.close)
        self.addCleanup(other.close)
        before = sorted(self.cache.rglob("*"))
        kernel.prune(lock, self.cache, "6.1.0-1-amd64", {"boot-new"})
        self.assertEqual(sorted(self.cache.rglob("*")), before)

    def test_boot_hash_covers_the_guest_files(self) -> None:
        guest = self.cache / "guest"
        shutil.copytree(kernel.GUEST_DIR, guest)
        with mock.patch.object(kernel, "GUEST_DIR", guest):
            first = kernel.boot_hash("6.1.0-1-amd64")
            self.assertEqual(kernel.boot_hash("6.1.0-1-amd64"), first)
            self.assertNotEqual(kernel.boot_hash("6.1.0-2-amd64"), first)
            for name in ("init.sh", "sshd_config.in"):
                with open(guest / name, "a") as f:
                    f.write("# changed\n")
                changed = kernel.boot_hash("6.1.0-1-amd64")
                self.assertNotEqual(changed, first)
                first = changed
        self.assertRegex(first, r"^[0-9a-f]{16}$")

    def test_cache_dir_checks(self) -> None:
        for bad in ("/tmp/softroce-cache-test", "/var/tmp/with space"):
            with self.subTest(bad=bad), \
                    mock.patch.dict(os.environ, {"RDMACXX_SOFTROCE_CACHE": bad}):
                self.addCleanup(shutil.rmtree, bad, True)
                with self.assertRaises(SetupError):
                    kernel.cache_dir()
        with mock.patch.dict(os.environ, {"RDMACXX_SOFTROCE_CACHE": str(self.cache / "a/../c")}):
            self.assertEqual(kernel.cache_dir(), self.cache / "c")


if __name__ == "__main__":
    unittest.main()
