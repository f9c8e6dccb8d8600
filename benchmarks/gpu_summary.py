"""The summary that benchmarks/gpu_check.sh prints: each target of the GPU issue, the
number measured against it, and whether it is met.

    python benchmarks/gpu_summary.py RESULTS_DIR TESTS_EXIT_STATUS
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# (shape, least MFU against the datasheet peak, least speed-up over MarianMTModel)
TARGETS = (("base", 0.40, 1.2), ("big", 0.45, 1.2))


def main() -> None:
    results, tests_status = Path(sys.argv[1]), int(sys.argv[2])
    tests = (results / "gpu_tests.txt").read_text() if (results / "gpu_tests.txt").is_file() else ""
    counts = re.findall(r"(\d+) (passed|failed|skipped|error)", tests)
    print(f"tests marked gpu: {', '.join(f'{n} {what}' for n, what in counts) or 'no result'} "
          f"({'ok' if tests_status == 0 else 'FAILED'})")
    throughput = results / "train_throughput.json"
    if not throughput.is_file():
        print("training throughput: no result")
        return
    data = json.loads(throughput.read_text())
    rows = {(row["shape"], row["model"]): row for row in data["rows"]}
    print(f"{data['device']}, torch {data['torch']}, {data['tokens']:,} target tokens a batch")
    print("| shape | target | ours | ours, DeepSpeed | ours, compiled | met |")
    print("|---|---|---:|---:|---:|---|")
    for shape, mfu, speedup in TARGETS:
        variants = [rows.get((shape, name)) for name in ("ours", "ours, DeepSpeed", "ours, compiled")]
        if variants[0] is None:
            continue
        best_mfu = max(row["mfu_datasheet"] for row in variants if row)
        best_speedup = max(row["vs_marian"] for row in variants if row)
        cells = [f"{row['mfu_datasheet']:.1%}" if row else "-" for row in variants]
        print(f"| {shape} | MFU >= {mfu:.0%} (datasheet) | {' | '.join(cells)} | "
              f"{'yes' if best_mfu >= mfu else 'no'} |")
        cells = [f"{row['vs_marian']:.2f}x" if row else "-" for row in variants]
        print(f"| {shape} | >= {speedup}x MarianMTModel tokens/s | {' | '.join(cells)} | "
              f"{'yes' if best_speedup >= speedup else 'no'} |")


if __name__ == "__main__":
    main()
