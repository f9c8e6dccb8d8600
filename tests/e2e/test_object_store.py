"""An S3 artifact root against a real S3-compatible server (SeaweedFS on loopback):
``nmt run``, ``status`` and ``verify`` in separate processes, as a user runs them, and
the credentials kept out of everything the pipeline writes or prints."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import pyarrow.fs as pafs
import pytest

from tests.helpers import REPO

SMOKE = str(REPO / "configs" / "smoke.yaml")
pytestmark = pytest.mark.slow


def nmt(workdir: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    """``nmt`` in its own process, with only the environment given (no AWS keys leak in)."""
    base = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=workdir, env={**base, **env},
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def ray_tmp():
    """Ray's session directory, short (its socket paths must fit in 107 bytes)."""
    directory = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def run_env(tmp_path: Path, multi30k: Path, ray_tmp: Path) -> dict:
    return {"NMT_MIRROR": str(multi30k), "NMT_CACHE_DIR": str(tmp_path / "cache"),
            "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "RAY_TMPDIR": str(ray_tmp),
            "COLUMNS": "250"}


def test_data_stages_run_resume_and_are_checked_on_the_s3_server(s3, tmp_path, multi30k, ray_tmp):
    env = {**run_env(tmp_path, multi30k, ray_tmp), **s3.env()}
    root = s3.uri("nmt-artifacts/run-one")
    first = nmt(tmp_path, env, "run", SMOKE, "--until", "tokenize", "--artifact-root", root)
    assert first.returncode == 0, first.stderr[-3000:]
    fs = s3.filesystem()
    manifests = fs.get_file_info(pafs.FileSelector("nmt-artifacts/run-one", recursive=True))
    assert sum(info.base_name == "MANIFEST.json" for info in manifests) == 4

    # Another working directory and an empty local cache: everything is a hit.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = nmt(elsewhere, {**env, "NMT_CACHE_DIR": str(elsewhere / "cache")}, "run", SMOKE, "--until", "tokenize",
                "--artifact-root", root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("cached") == 4 and " ran " not in again.stdout

    # A clean Parquet file rewritten in the store at the same size: status sees the newer
    # object without downloading it; so does verify, and it exits 1.
    clean = next(info.path for info in manifests if "/clean/" in info.path and info.path.endswith("train.parquet"))
    with fs.open_input_stream(clean) as stream:
        data = stream.read()
    time.sleep(1.1)  # S3 modification times have one-second resolution
    with fs.open_output_stream(clean) as stream:
        stream.write(data[:-1] + bytes([data[-1] ^ 1]))
    status = nmt(tmp_path, env, "status", SMOKE, "--artifact-root", root)
    assert status.returncode == 0
    assert "invalid (train.parquet was modified after the artifact was" in status.stdout
    verify = nmt(tmp_path, env, "verify", SMOKE, "--artifact-root", root)
    assert verify.returncode == 1 and "do not match their manifest: clean" in verify.stderr


def test_credentials_never_reach_manifests_mlflow_logs_or_errors(s3, tmp_path, multi30k, ray_tmp):
    env = run_env(tmp_path, multi30k, ray_tmp)  # no AWS variables: the keys are in the URI only
    root = (f"s3://nmt-artifacts/run-two?endpoint_override={s3.endpoint}&scheme=http"
            f"&access_key={s3.access_key}&secret_key={s3.secret_key}")
    result = nmt(tmp_path, env, "run", SMOKE, "--until", "bpe", "--artifact-root", root)
    assert result.returncode == 0, result.stderr[-3000:].replace(s3.secret_key, "<SECRET>")
    assert "secret_key=***" in result.stderr  # the root is shown, redacted

    written = [result.stdout, result.stderr]
    # Wrong secrets holding the characters a URI parser splits at, in each form a root
    # takes: refused by the server (or, unencoded, by the rule), never shown.
    server = f"endpoint_override={s3.endpoint}&scheme=http"
    for wrong in ("not/the@secret:key", "100%-wrong#secret&key=x", "plus+slash/at@colon:end"):
        encoded = quote(wrong, safe="")
        for uri, expected in [
            (f"s3://{s3.access_key}:{encoded}@nmt-artifacts/run-two?{server}", "ACCESS_DENIED"),
            (f"s3://nmt-artifacts/run-two?{server}&access_key={s3.access_key}&secret_key={encoded}",
             "ACCESS_DENIED"),
            (f"s3://{s3.access_key}:{wrong}@nmt-artifacts/run-two?{server}", "read more than one way"),
        ]:
            refused = nmt(tmp_path, env, "status", SMOKE, "--artifact-root", uri)
            shown = refused.stdout + refused.stderr
            assert refused.returncode != 0 and expected in shown, (wrong, shown[-2000:].replace(wrong, "<WRONG>"))
            assert wrong not in shown and encoded not in shown
            written += [refused.stdout, refused.stderr]
    fs = s3.filesystem()
    for info in fs.get_file_info(pafs.FileSelector("nmt-artifacts/run-two", recursive=True)):
        if info.base_name == "MANIFEST.json":
            with fs.open_input_stream(info.path) as stream:
                written.append(stream.read().decode())
    # Everything on disk: the MLflow database, the local cache, Ray's session logs.
    written += [path.read_bytes().decode("utf-8", "replace") for directory in (tmp_path, ray_tmp)
                for path in directory.rglob("*")
                if path.is_file() and not path.is_symlink() and path.stat().st_size < 50_000_000]
    leaks = [text[:200] for text in written if s3.secret_key in text or s3.access_key in text]
    assert not leaks, f"credentials found in {len(leaks)} outputs"
    assert any("mlflow.db" in str(path) for path in tmp_path.rglob("mlflow.db"))  # MLflow was checked too
