"""How long the ``nmt`` command takes to answer: CPU seconds (user + system) and wall
seconds of whole processes, measured with ``/usr/bin/time``, each command run once to
warm the file cache and then ``--runs`` times; minimum and median, against its target.

    python benchmarks/tooling/cli_speed.py --runs 7

The commands run as ``python -m pipeline`` from the repository (what the ``nmt``
script runs, without a shell shim in front), ``status`` and ``inspect`` against an
empty artifact root.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# (command words, the CPU seconds it should take at most)
COMMANDS = [
    (["--help"], 0.3),
    (["run", "--help"], 0.3),
    (["translate", "--help"], 0.3),
    (["status", "configs/smoke.yaml"], 1.5),
    (["inspect", "configs/smoke.yaml"], 1.5),
]


def timed(words: list[str], root: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one ``python -m pipeline WORDS`` process."""
    extra = ["--artifact-root", root] if words[0] in ("status", "inspect") else []
    done = subprocess.run(["/usr/bin/time", "-f", "%U %S %e", sys.executable, "-m", "pipeline", *words, *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"nmt {' '.join(words)} failed:\n{done.stderr[-2000:]}")
    user, system, wall = map(float, done.stderr.strip().splitlines()[-1].split())
    return user + system, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each command, after one warm-up")
    args = parser.parse_args()
    print("| command | CPU s, min | CPU s, median | wall s, median | target CPU s | met |")
    print("|---|--:|--:|--:|--:|---|")
    with tempfile.TemporaryDirectory() as root:
        for words, target in COMMANDS:
            timed(words, root)  # warm-up
            runs = [timed(words, root) for _ in range(args.runs)]
            cpu = [c for c, _ in runs]
            wall = [w for _, w in runs]
            median = statistics.median(cpu)
            print(f"| `nmt {' '.join(words)}` | {min(cpu):.2f} | {median:.2f} | {statistics.median(wall):.2f} | "
                  f"{target:g} | {'yes' if median <= target else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
