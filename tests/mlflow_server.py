"""A real ``mlflow server`` for tests: SQLite backend store, run artifacts proxied to an
S3 bucket (``--artifacts-destination``), on a loopback port."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.s3_server import SeaweedS3, free_port, kill_group


def mlflow_binary() -> str:
    beside = Path(sys.executable).parent / "mlflow"
    return str(beside) if beside.is_file() else shutil.which("mlflow") or "mlflow"


@dataclass
class MlflowServer:
    directory: Path
    s3: SeaweedS3
    bucket: str = "mlflow-artifacts"
    process: subprocess.Popen | None = None
    port: int = 0

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> MlflowServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        env = {**os.environ, **self.s3.env(), "MLFLOW_S3_ENDPOINT_URL": f"http://{self.s3.endpoint}"}
        command = [mlflow_binary(), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
                   "--backend-store-uri", f"sqlite:///{self.directory / 'mlflow.db'}",
                   "--artifacts-destination", f"s3://{self.bucket}"]
        log = open(self.directory / "mlflow-server.log", "wb")
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.directory / 'mlflow-server.log').read_text()[-2000:]}")
            try:
                if requests.get(f"{self.uri}/health", timeout=2).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"mlflow server not ready in {timeout:.0f} s")

    def stop(self) -> None:
        kill_group(self.process)
        self.process = None
