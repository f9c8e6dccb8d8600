"""Tokenize-stage throughput on the full Multi30k train set, against a single-process
SentencePiece encode of the same text, and the wall time of a fully cached re-run.

    NMT_MIRROR=/path/to/multi30k python benchmarks/data/tokenize_throughput.py

The data stages before tokenize run once (cached in a temporary store). The tokenize
stage is then forced at several shard counts on a local Ray instance; its time is the
stage task's wall time (read the clean text, encode every shard as its own task,
write Arrow shards and the index). The baseline is SentencePiece's encode of the same
source and target sentences in this process, one thread, no Arrow output.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sentencepiece as spm
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "configs" / "multi30k_en_de.yaml"))
    parser.add_argument("--shards", default="1,2,4,8")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import ray

    from pipeline.core.artifacts import ArtifactStore
    from pipeline.config import load_config
    from pipeline.graph import plan
    from pipeline.runner import connect_ray, run_pipeline
    from stages.clean import read_split
    from stages.download.config import mirrors_from

    root = Path(tempfile.mkdtemp(prefix="nmt-bench-"))
    store = ArtifactStore(str(root / "artifacts"))
    config = load_config(args.config)
    mirrors = mirrors_from(config.mirrors)
    connect_ray(None)
    ignore = lambda *_: None  # noqa: E731
    run_pipeline(plan(config, store, until="bpe"), store, mirrors, ignore, ignore)
    items = {item.stage.name: item for item in plan(config, store, until="bpe")}
    clean = store.local_path("clean", items["clean"].key)
    bpe = store.local_path("bpe", items["bpe"].key)

    table = read_split(clean, "train")
    src, tgt = table.column("src").to_pylist(), table.column("tgt").to_pylist()
    processor = spm.SentencePieceProcessor(model_file=str(bpe / "spm.model"))
    baseline = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        processor.encode(src, out_type=int, num_threads=1)
        processor.encode(tgt, out_type=int, num_threads=1)
        baseline.append(time.perf_counter() - started)
    pairs = len(src)

    rows = [("SentencePiece encode, 1 process, 1 thread", "-", statistics.median(baseline))]
    for shards in [int(s) for s in args.shards.split(",")]:
        sharded = load_config(args.config, [f"tokenize.shards={shards}"])
        times = []
        for _ in range(args.repeats):
            results = run_pipeline(plan(sharded, store, until="tokenize", force=("tokenize",)),
                                   store, mirrors, ignore, ignore)
            tokenize = next(r for r in results if r.name == "tokenize")
            times.append(tokenize.ended - tokenize.started)
        rows.append((f"tokenize stage (Ray, {ray.cluster_resources().get('CPU', 0):.0f} CPUs)",
                     str(shards), statistics.median(times)))
    ray.shutdown()

    cached = []
    command = [sys.executable, "-m", "pipeline", "run", args.config, "--until", "tokenize",
               "--artifact-root", str(root / "artifacts")]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}
    for _ in range(args.repeats):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=root, env=env)
        cached.append(time.perf_counter() - started)

    out = Table(title=f"Tokenize throughput, Multi30k train ({pairs:,} pairs), median of {args.repeats}")
    for column in ("what", "shards", "seconds", "pairs/s"):
        out.add_column(column, justify="right" if column != "what" else "left")
    for what, shards, seconds in rows:
        out.add_row(what, shards, f"{seconds:.2f}", f"{pairs / seconds:,.0f}")
    Console().print(out)
    Console().print(f"Fully cached re-run of the data stages (`nmt run --until tokenize`, new process, "
                    f"4 cache hits): median {statistics.median(cached):.2f} s "
                    f"(runs: {', '.join(f'{t:.2f}' for t in cached)})")


if __name__ == "__main__":
    main()
