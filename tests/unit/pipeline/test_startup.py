"""``nmt`` starts without the heavy libraries: the CLI module, ``--help``, ``--version``
and ``status`` import neither torch, Ray nor MLflow (each is imported where it is
used). Checked in a fresh interpreter, by what ``sys.modules`` holds afterwards, not by
timing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO

HEAVY = ("torch", "ray", "mlflow", "deepspeed", "pandas", "matplotlib", "sacrebleu")

PROBE = """
import json, sys
from typer.testing import CliRunner
from pipeline.cli import app
result = CliRunner().invoke(app, sys.argv[1:]) if sys.argv[1:] else None
print(json.dumps({"exit_code": result.exit_code if result else 0,
                  "loaded": sorted(name for name in {heavy} if name in sys.modules)}))
"""


@pytest.mark.parametrize("args", [[], ["--help"], ["--version"], ["run", "--help"],
                                  ["status", "configs/smoke.yaml", "--artifact-root", "{tmp}"]])
def test_the_command_line_starts_without_the_heavy_libraries(args, tmp_path):
    args = [arg.replace("{tmp}", str(tmp_path / "artifacts")) for arg in args]
    probe = PROBE.replace("{heavy}", repr(HEAVY))
    result = subprocess.run([sys.executable, "-c", probe, *args], cwd=REPO, capture_output=True, text=True,
                            check=True)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == {"exit_code": 0, "loaded": []}


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    from typer.testing import CliRunner

    from pipeline.cli import app

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"nmt-pipeline {version('nmt-pipeline')}"
