"""Ray's worker processes during one ``nmt run``, and whether Ray's raylet warned about them.

Runs ``nmt run CONFIG`` (an empty artifact root of its own unless ``--root`` names one)
and every 0.25 s lists this machine's Ray processes (those whose command line starts
with ``ray::``: tasks, actors, idle pooled workers, and the node's two agents). Prints
the most alive at once, what they were, and the raylet's warnings that "N PYTHON worker
processes have been started" in the run's Ray session, which it writes when a node's
worker processes, less 8 it keeps for I/O, reach 4 times its CPUs (16 on 2 CPUs).

    NMT_MIRROR=/path/to/multi30k python benchmarks/orchestration/ray_processes.py configs/smoke.yaml

Run it on an otherwise idle machine: other Ray instances' processes would be counted.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

WARNING = "PYTHON worker processes have been started"


def ray_processes() -> list[str]:
    names = []
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if command and command[0].startswith("ray::"):
            name = command[0]
            # An actor by its class, not the method it runs (ray::TrainController.run);
            # a stage task by its whole name (ray::stage:train/rnn_gru.2e12).
            names.append(name if name.startswith("ray::stage:") else name.split(".")[0])
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--root", type=Path, help="working directory: artifacts and MLflow (default: a new one)")
    parser.add_argument("--set", action="append", default=[], help="nmt run --set KEY=VALUE (repeatable)")
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="ray-processes-"))
    sessions_before = set(glob.glob("/tmp/ray/session_2*"))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}", "NMT_PROGRESS": "lines"}
    command = [sys.executable, "-m", "pipeline", "run", str(args.config.resolve()), "--artifact-root",
               str(root / "artifacts"), *(word for setting in args.set for word in ("--set", setting))]
    started = time.perf_counter()
    with open(root / "run.log", "w") as log:
        run = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        most: collections.Counter = collections.Counter()
        while run.poll() is None:
            names = ray_processes()
            if len(names) > sum(most.values()):
                most = collections.Counter(names)
            time.sleep(0.25)
    seconds = time.perf_counter() - started
    sessions = sorted(set(glob.glob("/tmp/ray/session_2*")) - sessions_before, key=os.path.getmtime)
    warnings = [line.strip() for session in sessions
                for line in Path(session, "logs", "raylet.out").read_text(errors="replace").splitlines()
                if WARNING in line]
    print(f"`nmt run {args.config}`: exit status {run.returncode}, {seconds:.0f} s (log: {root / 'run.log'})\n")
    print(f"| Ray processes at the most | {sum(most.values())} |\n|---|---:|")
    for name, count in most.most_common():
        print(f"| {name} | {count} |")
    print(f"\nraylet warnings that {WARNING!r}: {len(warnings)}")
    for line in warnings:
        print(f"    {line[:200]}")


if __name__ == "__main__":
    main()
