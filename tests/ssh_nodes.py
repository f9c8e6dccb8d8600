"""Machines reached over SSH, for tests: one OpenSSH server per loopback address
(127.0.0.2, 127.0.0.3, ...), each in PID and mount namespaces of its own, with host and
client keys made here, as ``ray up`` reaches the machines of a ``local`` provider cluster.

Each server, and everything started through it (a Ray node), sees only its own
namespace's processes: the ``ray stop`` that ``ray up`` and ``ray down`` run on each
node stops that node's Ray and never another Ray running on this machine (the test
suite's own, another test's). Each node has a home of its own too, an empty directory
mounted over root's home in its namespace (``home``): what a cluster config writes to
``~`` (``~/.bashrc``, ``~/.ray/auth_token``, Ray's bootstrap key) stays in the test,
and a node's login shell has only what the config put there, as on a fresh machine.
``stop`` ends each namespace, which ends every process in it. Port 22 on those
addresses, as Ray's SSH has no other; root, for the namespaces.
"""

from __future__ import annotations

import errno
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.helpers import processes_naming


def available(addresses: list[str]) -> str | None:
    """Why this machine cannot start servers on ``addresses``, or None."""
    if os.geteuid() != 0:
        return "the SSH servers run in PID namespaces of their own, which needs root"
    for tool in ("/usr/sbin/sshd", "ssh", "ssh-keygen", "unshare", "mount", "rsync"):
        if shutil.which(tool) is None:
            return f"{tool} not installed: run tests/install_system_packages.sh"
    for address in addresses:
        if port_taken(address, 22):
            return (f"port 22 on {address} is taken (another test suite's SSH node, or this machine's sshd "
                    "listening on every address)")
    return None


def port_taken(address: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return True
            raise
    return False


class SshNodes:
    def __init__(self, addresses: list[str]):
        self.addresses = addresses
        self.dir = Path(tempfile.mkdtemp(prefix="sshn-", dir="/tmp"))
        self.key = self.dir / "client_key"
        self.servers: dict[str, subprocess.Popen] = {}

    def home(self, address: str) -> Path:
        """The node's home directory, as this machine sees it (the node sees it as ~)."""
        return self.dir / f"home-{address}"

    def start(self) -> SshNodes:
        try:
            for name in ("host_key", "client_key"):
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / name)], check=True)
            (self.dir / "authorized_keys").write_text((self.dir / "client_key.pub").read_text())
            Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation directory
            for address in self.addresses:
                self._start(address)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, address: str) -> None:
        with socket.socket() as probe:
            # As sshd binds: connections of an earlier server in TIME_WAIT do not take the port.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, 22))
            except OSError as error:
                raise RuntimeError(f"port 22 on {address} is taken ({error.strerror}): another SSH server?") from None
        config = self.dir / f"sshd-{address}.conf"
        config.write_text(f"""\
Port 22
ListenAddress {address}
HostKey {self.dir / 'host_key'}
AuthorizedKeysFile {self.dir / 'authorized_keys'}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile {self.dir / f'sshd-{address}.pid'}
""")
        log = open(self.dir / f"sshd-{address}.log", "wb")
        # --mount-proc gives the server a mount namespace of its own (private), so the
        # mounts are seen by this node's processes only: first this Python where it lies
        # under root's home (pyenv's does), at the same path in the node's home, then
        # that home over root's.
        root_home, home = Path(pwd.getpwuid(0).pw_dir), self.home(address)
        home.mkdir()
        start = []
        for path in _under(root_home, [Path(os.path.realpath(sys.base_prefix)), Path(sys.prefix)]):
            (home / path.relative_to(root_home)).mkdir(parents=True)
            start.append(f"mount --bind {shlex.quote(str(path))} {shlex.quote(str(home / path.relative_to(root_home)))}")
        start += [f"mount --rbind {shlex.quote(str(home))} {shlex.quote(str(root_home))}",
                  f"exec /usr/sbin/sshd -D -f {shlex.quote(str(config))}"]
        self.servers[address] = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "/bin/sh", "-c", " && ".join(start)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 30
        while self.ssh(address, "true", check=False).returncode != 0:
            if time.time() > deadline or self.servers[address].poll() is not None:
                raise RuntimeError(f"sshd on {address} did not start: "
                                   f"{(self.dir / f'sshd-{address}.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)

    def ssh(self, address: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(["ssh", "-i", str(self.key), "-o", "StrictHostKeyChecking=no", "-o",
                               "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
                               f"root@{address}", command], capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise RuntimeError(f"ssh {address} {command!r} failed ({done.returncode}): {done.stderr}")
        return done

    def stop(self) -> list[str]:
        """End every namespace (and so every process started in it); the SSH servers
        of these nodes still running after that, which should be none."""
        for process in self.servers.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        # The kernel ends a namespace's processes once its first one (sshd) is killed,
        # a moment after ``unshare``, which is all ``wait`` waited for: one seen at once
        # may be on its way out (seen once in CI: the sshd listener), so look for 10 s.
        deadline = time.time() + 10
        while (left := processes_naming(str(self.dir))) and time.time() < deadline:
            time.sleep(0.1)
        shutil.rmtree(self.dir, ignore_errors=True)
        return left


def _under(home: Path, paths: list[Path]) -> list[Path]:
    """Those of ``paths`` inside ``home``, none inside another."""
    inside = sorted({path for path in paths if path.is_relative_to(home) and path != home})
    return [path for path in inside if not any(path != other and path.is_relative_to(other) for other in inside)]
