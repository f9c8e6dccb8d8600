"""Budgets branched from one stable phase against the same budgets trained alone.

Two `nmt run`s of one config into one artifact store, both with the wsd schedule: the
budgets trained alone (each from nothing), then branched (``branch_budgets: true``: one
stable phase per seed, each budget decaying from its segment). For every budget and
seed the table gives test BLEU (beam) of both, their difference, and the spread between
the seeds of the runs trained alone; then the FLOPs each sweep trained (a branch counts
only what it computed itself) and the wall time of each `nmt run`.

    python benchmarks/training/branched_budgets.py --root /tmp/branched

Defaults: the sweep's Transformer (configs/multi30k_sweep.yaml, the earlier default recipe) at 4e12 and 8e12
counted FLOPs, seeds 1 and 2, decay over the last fifth; ``--set`` adds overrides to
both runs. Multi30k is read through NMT_MIRROR (or NMT_CORPORA/multi30k).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pipeline.config import budget_label, load_config  # noqa: E402
from pipeline.core.artifacts import ArtifactStore  # noqa: E402
from pipeline.graph import plan  # noqa: E402
from stages.evaluate.artifact import load_scores  # noqa: E402
from stages.train.artifact import load_summary  # noqa: E402

CONFIG = REPO / "configs" / "multi30k_sweep.yaml"
# The sweep's runs under wsd: one warmup for every budget (a number of updates,
# as branching needs), the averaged checkpoints inside the decay (those at 90% and 100%
# of the run: checkpoints every tenth), no BLEU curves
# (they decode during training and the comparison does not read them).
WSD = ["train.schedule=wsd", "train.warmup_fraction=null", "train.warmup_steps=50", "train.decay_fraction=0.2",
       "train.average_fraction=0.15",
       "train.valid_bleu_every=null", "evaluate.ctranslate2=null",
       "models=[{name: transformer_tiny, family: transformer, preset: tiny, settings: {d_model: 128, heads: 4, "
       "ff_dim: 256, encoder_layers: 4, decoder_layers: 4, dropout: 0.1, pre_norm: true}}]"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="working directory (artifacts, logs)")
    parser.add_argument("--budgets", type=float, nargs="+", default=[4e12, 8e12])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--set", dest="settings", action="append", default=[], help="an override for both runs")
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    common = [*WSD, f"budgets=[{', '.join(map(repr, args.budgets))}]", f"seeds={args.seeds}", *args.settings]
    sweeps = {"alone": common, "branched": [*common, "branch_budgets=true"]}
    seconds = {name: run(args.root, name, settings) for name, settings in sweeps.items()}

    store = ArtifactStore(str(args.root / "artifacts"))
    results = {name: read(store, load_config(CONFIG, settings)) for name, settings in sweeps.items()}
    print(f"{CONFIG.name}, Transformer-Tiny, wsd (decay over the last fifth), beam BLEU on test2016\n")
    print("| budget | seed | BLEU alone | BLEU branched | branched - alone | seed spread alone |")
    print("|---:|---:|---:|---:|---:|---:|")
    for budget in args.budgets:
        alone = [results["alone"]["bleu"][(budget, seed)] for seed in args.seeds]
        spread = max(alone) - min(alone)
        for seed in args.seeds:
            a, b = results["alone"]["bleu"][(budget, seed)], results["branched"]["bleu"][(budget, seed)]
            print(f"| {budget_label(budget)} | {seed} | {a:.2f} | {b:.2f} | {b - a:+.2f} | {spread:.2f} |")
        mean_alone = statistics.mean(alone)
        mean_branched = statistics.mean(results["branched"]["bleu"][(budget, seed)] for seed in args.seeds)
        print(f"| {budget_label(budget)} | mean | {mean_alone:.2f} | {mean_branched:.2f} | "
              f"{mean_branched - mean_alone:+.2f} | |")
    print("\n| sweep | train stages | FLOPs trained | `nmt run` wall time |")
    print("|---|---:|---:|---:|")
    for name in sweeps:
        print(f"| {name} | {results[name]['stages']} | {results[name]['flops']:.3g} | {seconds[name] / 60:.1f} min |")


def run(root: Path, name: str, settings: list[str]) -> float:
    """One `nmt run` (its output in ROOT/NAME.log); its wall seconds."""
    command = [sys.executable, "-m", "pipeline", "run", str(CONFIG), "--artifact-root", str(root / "artifacts"),
               *[arg for setting in settings for arg in ("--set", setting)]]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
           "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if "NMT_MIRROR" not in env and "NMT_CORPORA" in env:
        env["NMT_MIRROR"] = str(Path(env["NMT_CORPORA"]) / "multi30k")
    started = time.perf_counter()
    with open(root / f"{name}.log", "w") as log:
        status = subprocess.run(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    if status != 0:
        sys.exit(f"the {name} run failed ({status}); see {root / f'{name}.log'}")
    return time.perf_counter() - started


def read(store: ArtifactStore, config) -> dict:
    """Test BLEU per (budget, seed) and the FLOPs its train stages computed themselves."""
    bleu, flops, stages = {}, 0.0, 0
    for item in plan(config, store):
        metrics = store.read_manifest(item.stage.name, item.key)["metrics"]
        where = store.path(item.stage.name, item.key)
        if item.stage.group == "train":
            stages += 1
            summary = load_summary(metrics, where)
            flops += summary.train_flops if summary.own_train_flops is None else summary.own_train_flops
        if item.stage.group == "evaluate":
            spec = next(run for run in config.trained_models() if item.stage.name.endswith(f"/{run.name}"))
            bleu[(spec.train["max_train_flops"], spec.train["seed"])] = load_scores(metrics, where).beam.bleu
    return {"bleu": bleu, "flops": flops, "stages": stages}


if __name__ == "__main__":
    main()
