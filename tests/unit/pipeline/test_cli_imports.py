"""``nmt --help`` answers at once: the command line's module imports none of what the
commands load when they run (benchmarks/tooling/cli_speed.py measures the time)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO

HEAVY = ("torch", "ray", "mlflow", "pyarrow", "requests", "pandas", "pydantic", "deepspeed", "sentencepiece")


def test_importing_the_command_line_imports_nothing_heavy():
    probe = ("import json, sys; import pipeline.cli; "
             f"print(json.dumps(sorted({{name.split('.')[0] for name in sys.modules}} & set({HEAVY!r}))))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_help_lists_every_command_without_loading_them():
    done = subprocess.run([sys.executable, "-m", "pipeline", "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    for command in ("run", "status", "verify", "inspect", "report", "translate", "attention", "export", "serve",
                    "cluster-wait"):
        assert f" {command} " in done.stdout, done.stdout


def test_inspect_counts_the_models_without_importing_torch():
    # Its table comes from the configs alone (stages/shared/models/parameter_layout.py).
    probe = ("import sys; from pipeline.cli import app\n"
             "try:\n    app(['inspect', 'configs/smoke.yaml'], prog_name='nmt')\n"
             "except SystemExit as ended:\n    assert not ended.code, ended.code\n"
             "print('torch imported' if 'torch' in sys.modules else 'no torch')")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert done.returncode == 0, done.stderr
    assert "transformer_tiny" in done.stdout and done.stdout.strip().endswith("no torch")
