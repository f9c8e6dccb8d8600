"""What starting a DeepSpeed engine builds on a CPU machine (stages/train/engine.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stages.train.engine import INFERENCE_ALLREDUCE_OP
from tests.s3_server import free_port

pytestmark = pytest.mark.trains  # builds a DeepSpeed engine

REPO = Path(__file__).resolve().parents[4]


def test_deepspeed_starts_without_building_its_inference_allreduce_even_past_a_stale_build_lock(tmp_path):
    # A build killed mid-way leaves torch's lock file in the extension's directory; a
    # build that reached it would wait on it forever. Ours must not build at all.
    extensions = tmp_path / "torch_extensions"
    (extensions / INFERENCE_ALLREDUCE_OP).mkdir(parents=True)
    (extensions / INFERENCE_ALLREDUCE_OP / "lock").touch()
    script = textwrap.dedent("""
        import torch
        from stages.train.engine import import_deepspeed

        deepspeed = import_deepspeed()
        deepspeed.init_distributed(dist_backend="gloo")  # DeepSpeed's communication backend, as initialize starts it
        assert torch.distributed.get_world_size() == 1
        print("started")
    """)
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(extensions), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), DS_ACCELERATOR="cpu",
               PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0 and "started" in done.stdout, done.stderr[-3000:]
    assert sorted(p.name for p in (extensions / INFERENCE_ALLREDUCE_OP).iterdir()) == ["lock"]
