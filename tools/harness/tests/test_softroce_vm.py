"""What softroce hands the VMs: QEMU command lines, run files, the command's environment,
and how the consoles are filtered."""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from harness.softroce import nodes, vm
from harness.softroce.common import Options
from harness.softroce.console import Console
from harness.softroce.kernel import BootFiles

BOOT = BootFiles(Path("/c"), "6.1.0-56-amd64", Path("/c/kernels/k/boot-h/kernel"),
                 Path("/c/kernels/k/boot-h/initrd.img"))
RUN = Path("/c/runs/run.abc123")
COMMON = ["qemu-system-x86_64", "-accel", "tcg,thread=multi", "-cpu", "max"]
VIRTFS = ["-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,multidevs=remap"]


def no_env(**values: str):
    """os.environ without softroce's own variables, plus VALUES."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDMACXX_SOFTROCE_")}
    return mock.patch.dict(os.environ, dict(env, **values), clear=True)


class QemuArgs(unittest.TestCase):
    def test_one_node(self) -> None:
        with no_env():
            args = vm.qemu_args(BOOT, RUN, 1, 1, verbose=False, epoch=1700000000)
        self.assertEqual(args, COMMON + [
            "-smp", "2", "-m", "2G", "-nographic", "-no-reboot", "-nic", "none",
            "-kernel", "/c/kernels/k/boot-h/kernel", "-initrd", "/c/kernels/k/boot-h/initrd.img",
            "-append", "quiet loglevel=1 console=ttyS0 panic=-1 mitigations=off "
                       "softroce_run=/c/runs/run.abc123 softroce_epoch=1700000000"] + VIRTFS)

    def test_one_node_verbose_memory_cpus(self) -> None:
        with no_env(RDMACXX_SOFTROCE_MEMORY="4G", RDMACXX_SOFTROCE_CPUS="3"):
            args = vm.qemu_args(BOOT, RUN, 1, 1, verbose=True, epoch=5)
        self.assertEqual(args[args.index("-smp") + 1], "3")
        self.assertEqual(args[args.index("-m") + 1], "4G")
        self.assertEqual(args[args.index("-append") + 1],
                         "console=ttyS0 panic=-1 mitigations=off softroce_run=/c/runs/run.abc123 "
                         "softroce_epoch=5 softroce_verbose=1")

    def test_node_of_several(self) -> None:
        with no_env():
            args = vm.qemu_args(BOOT, RUN, 3, 3, verbose=False, switches=[RUN / "vde"], epoch=7)
        self.assertEqual(args, COMMON + [
            "-smp", "1", "-m", "2G", "-nographic", "-no-reboot", "-nic", "none",
            "-kernel", "/c/kernels/k/boot-h/kernel", "-initrd", "/c/kernels/k/boot-h/initrd.img",
            "-append", "quiet loglevel=1 console=ttyS0 panic=-1 mitigations=off "
                       "softroce_run=/c/runs/run.abc123 softroce_epoch=7 softroce_node=3 "
                       "no_timer_check"] + VIRTFS + [
            "-netdev", "vde,id=n0,sock=/c/runs/run.abc123/vde",
            "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:c6:12:03,romfile="])

    def test_cpus_of_several_nodes_can_be_set(self) -> None:
        with no_env(RDMACXX_SOFTROCE_CPUS="2"):
            args = vm.qemu_args(BOOT, RUN, 1, 2, verbose=False, switches=[RUN / "vde"])
        self.assertEqual(args[args.index("-smp") + 1], "2")


def sourced(text: str) -> dict[str, str]:
    """The variables a POSIX shell gets from sourcing TEXT."""
    out = subprocess.run(["sh", "-c", text + "\nset"], capture_output=True, text=True,
                         check=True).stdout
    return {line.split("=", 1)[0]: line for line in out.splitlines() if "=" in line}


class RunFiles(unittest.TestCase):
    def test_params_of_one_node(self) -> None:
        text = vm.params_text(RUN, 1, 1, "/work/x")
        values = dict(line.split("=", 1) for line in text.splitlines()[1:])
        self.assertTrue(text.startswith("# softroce run parameters, read by the guest init\n"))
        self.assertEqual(list(values), [
            "NONCE", "NODE", "NODES", "NODE_NAME", "NODE_ADDR", "NODE_PREFIX", "NETDEV",
            "DEVICE", "RAILS", "RAIL_NETDEVS", "RAIL_ADDRS", "KEEP_TMP", "RUN_UID", "RUN_GID", "RUN_GROUPS", "HOST_RDMA",
            "HOST_SETPRIV", "HOST_ENV", "HOST_BASH"])
        self.assertEqual([values[k] for k in ("NONCE", "NODE", "NODES", "NODE_NAME",
                                              "NODE_ADDR", "NODE_PREFIX", "NETDEV", "DEVICE",
                                              "KEEP_TMP")],
                         ["run.abc123", "1", "1", "softroce1", "198.18.0.1", "24", "rxcxx0",
                          "rxe0", "''"])
        self.assertEqual([values[k] for k in ("RAILS", "RAIL_NETDEVS", "RAIL_ADDRS")],
                         ["1", "rxcxx0", "198.18.0.1"])
        self.assertEqual(values["RUN_UID"], str(os.geteuid()))
        self.assertEqual(values["RUN_GROUPS"].split(",")[0], str(os.getegid()))
        self.assertTrue(values["HOST_BASH"].endswith("/bash"))

    def test_params_of_node_2_of_3_under_tmp(self) -> None:
        text = vm.params_text(RUN, 2, 3, "/tmp/work dir/sub")
        values = dict(line.split("=", 1) for line in text.splitlines()[1:])
        self.assertEqual((values["NODE"], values["NODES"], values["NODE_ADDR"],
                          values["NETDEV"], values["KEEP_TMP"]),
                         ("2", "3", "198.18.0.2", "eth0", "'/tmp/work dir'"))
        self.assertTrue(values["HOST_SSHD"].endswith("sshd"))
        self.assertTrue(values["HIDE_BASHRC"].endswith("/.bashrc"))
        # busybox sh sources it: any POSIX shell must read the same values back.
        self.assertIn("KEEP_TMP='/tmp/work dir'", sourced(text)["KEEP_TMP"])

    def test_params_of_rails(self) -> None:
        # One node: a dummy interface per rail; several: the NIC on each rail's switch.
        one = sourced(vm.params_text(RUN, 1, 1, "/w", 2))
        self.assertEqual((one["RAILS"], one["RAIL_NETDEVS"], one["RAIL_ADDRS"]),
                         ("RAILS='2'", "RAIL_NETDEVS='rxcxx0 rxcxx1'", "RAIL_ADDRS='198.18.0.1 198.18.1.1'"))
        two = dict(line.split("=", 1) for line in vm.params_text(RUN, 2, 3, "/w", 2).splitlines()[1:])
        self.assertEqual((two["NETDEV"], two["RAIL_NETDEVS"], two["RAIL_ADDRS"]),
                         ("eth0", "'eth0 eth1'", "'198.18.0.2 198.18.1.2'"))

    def test_cmd_script_rails(self) -> None:
        text = vm.cmd_script(RUN, ["true"], "/w", {}, 2, "198.18.0.1,198.18.0.2", 2)
        self.assertIn("export RDMACXX_RAILS=2 RDMACXX_DEVICES=rxe0,rxe1 "
                      "RDMACXX_ADDRS=198.18.0.1,198.18.1.1\n", text)

    def test_cmd_script_one_node(self) -> None:
        env = {"HOME": "/root", "PATH": "/usr/bin:/bin", "PWD": "/x", "SHLVL": "2",
               "RDMACXX_DEVICE": "mlx5_0", "RDMACXX_ADDR": "10.0.0.1", "DISPLAY": ":0",
               "BASH_FUNC_f%%": "() { :; }", "WEIRD": "it's \"quoted\"\nand $x", "1BAD": "x",
               "SSH_AUTH_SOCK": "/run/agent"}
        text = vm.cmd_script(RUN, ["bash", "-c", "echo $RDMACXX_DEVICE"], "/work/x", env, 1)
        self.assertEqual(text.splitlines()[:5], [
            "# softroce: the caller's environment, directory and command",
            "export HOME=/root", "export PATH=/usr/bin:/bin",
            "export WEIRD='it'\"'\"'s \"quoted\"", "and $x'"])
        self.assertIn("export RDMACXX_DEVICE=rxe0 RDMACXX_ADDR=198.18.0.1 RDMACXX_SOFTROCE_ROUTE=vm\n",
                      text)
        self.assertEqual(text.splitlines()[-5:], [
            "export RDMACXX_RAILS=1 RDMACXX_DEVICES=rxe0 RDMACXX_ADDRS=198.18.0.1",
            '[[ -z ${TMPDIR:-} || -d $TMPDIR ]] || mkdir -p -- "$TMPDIR"',
            "cd -- /work/x || exit 125",
            "command -v -- bash >/dev/null || "
            '{ printf "softroce: %s: command not found\\n" bash >&2; exit 127; }',
            "exec bash -c 'echo $RDMACXX_DEVICE'"])
        for dropped in ("PWD", "SHLVL", "mlx5_0", "DISPLAY", "BASH_FUNC", "1BAD", "SSH_AUTH"):
            self.assertNotIn(dropped, text)

    def test_cmd_script_runs_under_bash(self) -> None:
        """The script as the guest runs it (env -i bash cmd.sh): environment, directory,
        status and the 127 of a missing command."""
        with tempfile.TemporaryDirectory() as tmp:
            env = {"PATH": os.environ["PATH"], "WEIRD": "a 'b'\n\"c\" $d"}
            script = Path(tmp) / "cmd.sh"
            script.write_text(vm.cmd_script(RUN, ["sh", "-c", 'printf "%s|" "$WEIRD" '
                                                  '"$RDMACXX_ADDR" "$PWD"; exit 3'], tmp, env, 1))
            result = subprocess.run(["env", "-i", "bash", str(script)], capture_output=True,
                                    text=True, check=False)
            self.assertEqual((result.returncode, result.stdout),
                             (3, f"a 'b'\n\"c\" $d|198.18.0.1|{os.path.realpath(tmp)}|"))
            script.write_text(vm.cmd_script(RUN, ["no-such-cmd"], tmp, env, 1))
            result = subprocess.run(["env", "-i", "bash", str(script)], capture_output=True,
                                    text=True, check=False)
            self.assertEqual((result.returncode, result.stderr),
                             (127, "softroce: no-such-cmd: command not found\n"))

    def test_cmd_script_several_nodes(self) -> None:
        text = vm.cmd_script(RUN, ["true"], "/w", {}, 2, "198.18.0.1,198.18.0.2")
        self.assertIn("export RDMACXX_NODE=1 RDMACXX_NODES=198.18.0.1,198.18.0.2 "
                      "RDMACXX_SSH=/c/runs/run.abc123/bin/ssh "
                      "OMPI_MCA_plm_rsh_agent=/c/runs/run.abc123/bin/ssh\n"
                      'export PATH=/c/runs/run.abc123/bin:"$PATH"\n', text)

    def test_write_run_files_several_nodes(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp)
            opts = Options(command=["true"], nodes=2)
            vm.write_run_files(run, 2, opts, "198.18.0.1,198.18.0.2")
            self.assertEqual(sorted(p.name for p in run.iterdir()), ["params.2"])
            vm.write_run_files(run, 1, opts, "198.18.0.1,198.18.0.2")
            self.assertEqual(sorted(p.name for p in run.iterdir()),
                             ["cmd.sh", "params.1", "params.2"])

    def test_ssh_files(self) -> None:
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.object(nodes, "keygen", self.fake_keygen):
            run = Path(tmp) / "run.x"
            run.mkdir()
            nodes.write_ssh_files(run, 3, "/usr/bin:/bin")
            ssh = run / "ssh"
            self.assertEqual((ssh / "known_hosts").read_text(),
                             "198.18.0.1,node1,softroce1,198.18.0.2,node2,softroce2,"
                             "198.18.0.3,node3,softroce3 ssh-ed25519 HOSTKEY\n")
            sshd = (ssh / "sshd_config.2").read_text()
            self.assertIn("ListenAddress 198.18.0.2\n", sshd)
            self.assertIn(f"HostKey {ssh}/host\n", sshd)
            self.assertIn(f'SetEnv "PATH={run}/bin:/usr/bin:/bin" RDMACXX_NODE=2 '
                          "RDMACXX_NODES=198.18.0.1,198.18.0.2,198.18.0.3 RDMACXX_DEVICE=rxe0 "
                          "RDMACXX_ADDR=198.18.0.2 RDMACXX_RAILS=1 RDMACXX_DEVICES=rxe0 "
                          "RDMACXX_ADDRS=198.18.0.2 RDMACXX_SOFTROCE_ROUTE=vm "
                          f'"RDMACXX_SSH={run}/bin/ssh" "OMPI_MCA_plm_rsh_agent={run}/bin/ssh"\n',
                          sshd)
            config = (ssh / "ssh_config").read_text()
            self.assertIn(f"  IdentityFile {ssh}/id\n", config)
            self.assertNotIn("@", config.replace("%C", ""))
            wrapper = (run / "bin/ssh").read_text()
            self.assertTrue(wrapper.endswith(f' -F {shlex.quote(str(ssh / "ssh_config"))} "$@"\n'))
            self.assertTrue(os.access(run / "bin/ssh", os.X_OK))
            self.assertTrue((run / "hosts").read_text().endswith(
                "# softroce nodes\n198.18.0.1 node1 softroce1\n198.18.0.2 node2 softroce2\n"
                "198.18.0.3 node3 softroce3\n"))
            self.assertEqual((ssh / "authorized_keys").read_text(), "ssh-ed25519 USERKEY x\n")

    @staticmethod
    def fake_keygen(path: Path, comment: str) -> None:
        key = "HOSTKEY" if path.name == "host" else "USERKEY"
        path.write_text("PRIVATE\n")
        Path(f"{path}.pub").write_text(f"ssh-ed25519 {key} x\n")


class Consoles(unittest.TestCase):
    def feed(self, node: int, lines: list[bytes], verbose: bool = False) -> tuple[str, list]:
        out, begun = io.BytesIO(), []
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "console.log"
            console = Console("run.n", node, log, out, verbose, lambda: begun.append(1))
            r, w = os.pipe()
            os.write(w, b"".join(lines))
            os.close(w)
            with open(r, "rb") as stream:
                console.run(stream)
            self.assertEqual(log.read_bytes(),
                             b"".join(line.replace(b"\r", b"") for line in lines))
        return out.getvalue().decode(), begun

    LINES = [b"[ 0.1] booting\r\n", b"@@softroce:run.n:begin@@\r\n", b"out 1\r\n", b"out 2\n",
             b"no newline@@softroce:run.n:end:0@@\r\n", b"reboot: Power down\r\n"]

    def test_node_1_shows_the_command_only(self) -> None:
        self.assertEqual(self.feed(1, self.LINES), ("out 1\nout 2\nno newline\n", [1]))

    def test_node_1_verbose_shows_everything_else_too(self) -> None:
        out, _ = self.feed(1, self.LINES, verbose=True)
        self.assertEqual(out, "[ 0.1] booting\nout 1\nout 2\nno newline\nreboot: Power down\n")

    def test_other_markers_are_ignored(self) -> None:
        out, begun = self.feed(1, [b"@@softroce:run.other:begin@@\n", b"x\n"])
        self.assertEqual((out, begun), ("", []))

    def test_node_k_is_prefixed_once_up(self) -> None:
        out, begun = self.feed(2, [b"booting\r\n", b"@@softroce:run.n:ready@@\r\n",
                                   b"[ 16.3] sysrq: Power Off\r\n",
                                   b"qemu-system-x86_64: terminating on signal 15 from pid 9\n"])
        self.assertEqual((out, begun), ("[node2] [ 16.3] sysrq: Power Off\n", []))

    def test_node_k_verbose(self) -> None:
        out, _ = self.feed(3, [b"booting\n", b"@@softroce:run.n:ready@@\n", b"up\n"], True)
        self.assertEqual(out, "[node3] booting\n[node3] up\n")


if __name__ == "__main__":
    unittest.main()
