"""Two ``nmt run``s of one config against one artifact root at the same time, each with
its own Ray instance, cache and MLflow store (two users sharing a store): on a local
root and on an S3 server. The second starts while the first trains, so that it reaches
a key the first holds. Both finish with the same keys, every stage is computed by
exactly one of them (the other waits on its lease and takes the artifact as a cache
hit), every manifest verifies, and nothing half-written or held is left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from pipeline.core.artifacts import ArtifactState, ArtifactStore
from pipeline.config import load_config
from pipeline.graph import plan
from tests.helpers import REPO

CONFIG = str(REPO / "configs" / "smoke.yaml")
UNTIL = "train/rnn_tiny"
# Half the smoke config's training, without its BLEU curves: long enough that the second
# run, started once the first holds the train key, reaches that key while it is held.
SETTINGS = ["train.max_steps=100", "train.warmup_steps=20", "train.valid_every=50", "train.checkpoint_every=50",
            "train.valid_bleu_every=null"]
RUN = ["run", CONFIG, "--until", UNTIL, *[arg for setting in SETTINGS for arg in ("--set", setting)]]
pytestmark = pytest.mark.slow


def start_run(workdir: Path, multi30k: Path, root: str, extra_env: dict) -> tuple[subprocess.Popen, Path]:
    workdir.mkdir()
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # socket paths must stay short
    env = {**{key: value for key, value in os.environ.items() if not key.startswith("AWS_")}, **extra_env,
           "NMT_MIRROR": str(multi30k), "NMT_CACHE_DIR": str(workdir / "cache"), "RAY_TMPDIR": str(ray_tmp),
           "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}", "COLUMNS": "250"}
    process = subprocess.Popen([sys.executable, "-m", "pipeline", *RUN, "--artifact-root", root], cwd=workdir,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return process, ray_tmp


@pytest.fixture(params=["local", "s3"])
def shared_root(request, tmp_path):
    """(root URI, environment, filesystem and path to list it) for each kind of root."""
    if request.param == "local":
        yield str(tmp_path / "shared"), {}, pafs.LocalFileSystem(), str(tmp_path / "shared")
    else:
        s3 = request.getfixturevalue("s3")
        with pytest.MonkeyPatch.context() as patch:
            for name, value in s3.env().items():
                patch.setenv(name, value)
            yield s3.uri("nmt-artifacts/shared"), s3.env(), s3.filesystem(), "nmt-artifacts/shared"


def test_two_runs_at_once_compute_each_stage_once_and_agree(shared_root, tmp_path, multi30k):
    root, env, fs, listed = shared_root
    runs = [start_run(tmp_path / "alice", multi30k, root, env)]
    deadline = time.time() + 300
    while not [info for info in fs.get_file_info(pafs.FileSelector(listed, recursive=True, allow_not_found=True))
               if "/train/" in info.path and info.path.endswith(".lease")]:
        assert runs[0][0].poll() is None and time.time() < deadline, "the first run never held a train key"
        time.sleep(0.05)
    runs.append(start_run(tmp_path / "bob", multi30k, root, env))
    outputs = []
    for process, ray_tmp in runs:
        output, _ = process.communicate(timeout=900)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        assert process.returncode == 0, output[-3000:]
        outputs.append(output)

    # The second run reached a key the first held, and waited for it.
    assert "waiting for" in outputs[1], outputs[1][-3000:]
    # Each stage (four data stages, one training) ran in one run and was a cache hit in the other.
    assert sum(output.count("│ ran ") for output in outputs) == 5, outputs
    assert sum(output.count("│ cached ") for output in outputs) == 5, outputs
    store = ArtifactStore(root, local_cache=tmp_path / "check-cache")
    planned = plan(load_config(CONFIG, SETTINGS), store, until=UNTIL)
    for item in planned:
        assert item.key in outputs[0] and item.key in outputs[1]
        assert store.status(item.stage.name, item.key, verify=True).state == ArtifactState.CACHED
    left = [info.path for info in fs.get_file_info(pafs.FileSelector(listed, recursive=True))
            if ".partial" in info.path or ".lease" in info.path]
    assert left == []
