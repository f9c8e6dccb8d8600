"""benchmarks/gpu_check.sh runs on a GPU image that has no Ray and no MLflow (and gets
DeepSpeed and pydantic as carried wheels). What it runs must import without them:
this runs its imports, and the collection of the tests marked gpu, with both blocked."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import REPO

BLOCKER = '''
import sys


class _NotOnTheGpuImage:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"ray", "mlflow"}:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: the GPU image has none)")
        return None


sys.meta_path.insert(0, _NotOnTheGpuImage())
'''


def _run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_what_gpu_check_runs_imports_without_ray_or_mlflow(tmp_path):
    modules = ["benchmarks.train_throughput", "benchmarks.decode_speed", "benchmarks.gpu_summary",
               "stages.train.loop", "stages.evaluate.translator", "tests.train_loops", "tests.gpu.test_cuda"]
    imported = _run(tmp_path, "-c", f"import {', '.join(modules)}")
    assert imported.returncode == 0, imported.stderr
    blocked = _run(tmp_path, "-c", "import ray")  # the blocker itself works
    assert blocked.returncode != 0 and "blocked" in blocked.stderr


def test_the_gpu_tests_collect_without_ray_or_mlflow(tmp_path):
    collected = _run(tmp_path, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "tests/gpu",
                     "-p", "no:cacheprovider")
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert " tests collected" in collected.stdout or " selected" in collected.stdout
