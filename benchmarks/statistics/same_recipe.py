"""A recipe compared with itself: the report's test on real runs where the truth is known.

Each family's runs of one recipe at one budget, six seeds, split three against three in
each of the 10 ways that keep seed 1 on the first side; for each split the two halves
become two models of the family and go through the report (``stages.report.write_report``,
the path ``nmt report`` takes once it has gathered the runs), each family's halves
declared a primary comparison. A recipe does not differ from itself, so every
"significant" is a false positive: at alpha 0.05 the 40 comparisons (10 splits x 4
families) should give about 2, and more than 4 says the test rejects too often on seeds
as they really are. The splits share seeds, so the 40 are not independent. Also printed:
each family's six seeds' BLEU, their spread, and the spread of their output lengths,
for the simulations (``benchmarks/statistics/verdict_calibration.py``) to use.

    nmt run configs/multi30k_en_de.yaml --set 'seeds=[1,2,3,4,5,6]' --set 'budgets=[3.0e12]' \\
        --set branch_budgets=false --set train.max_train_flops=3.0e12
    python benchmarks/statistics/same_recipe.py configs/multi30k_en_de.yaml --output same_recipe \\
        --set 'seeds=[1,2,3,4,5,6]' --set 'budgets=[3.0e12]' --set branch_budgets=false \\
        --set train.max_train_flops=3.0e12
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from itertools import combinations
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pipeline.commands.output import load_experiment, open_store  # noqa: E402
from pipeline.compare import from_config  # noqa: E402
from stages.report import write_report  # noqa: E402
from stages.shared import gate  # noqa: E402
from stages.report.significance import ALPHA, PRIMARY, PRIMARY_METRIC  # noqa: E402

SEEDS_A_SIDE = 3


def splits(seeds: list[int]) -> list[tuple[int, ...]]:
    """The first halves: every set of three seeds holding the first seed (the other half
    is the rest), so that no split is counted twice with its sides swapped."""
    first, *others = sorted(seeds)
    return [(first, *chosen) for chosen in combinations(others, SEEDS_A_SIDE - 1)]


def halves(rows: list[dict], first_half: tuple[int, ...]) -> tuple[list[dict], list[list[str]]]:
    """The rows with each model split in two (``MODEL.first``, ``MODEL.second``) by seed,
    and each model's two halves as a declared comparison."""
    split = [{**row, "model": f"{row['model']}.{'first' if row['seed'] in first_half else 'second'}"} for row in rows]
    models = list(dict.fromkeys(row["model"] for row in rows))
    return split, [[f"{model}.first", f"{model}.second"] for model in models]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="as nmt run's --set")
    parser.add_argument("--output", type=Path, default=Path("same_recipe"))
    parser.add_argument("--artifact-root", help="as nmt run's --artifact-root (default: the config's)")
    args = parser.parse_args()
    experiment = load_experiment(args.config, args.overrides)
    gathered = from_config(experiment, open_store(experiment, args.artifact_root))
    for reason in gathered.skipped:
        print(f"skipped: {reason}", file=sys.stderr)
    rows = [row for row in gathered.rows if row["name"] in gathered.outputs]
    seeds = sorted({row["seed"] for row in rows})
    if len(seeds) != 2 * SEEDS_A_SIDE:
        sys.exit(f"{len(seeds)} seeds evaluated ({seeds}); the check needs {2 * SEEDS_A_SIDE}")
    found = []
    for index, first_half in enumerate(splits(seeds), 1):
        split_rows, declared = halves(rows, first_half)
        output = args.output / f"split_{index:02d}"
        write_report(split_rows, {row["name"]: gathered.curves.get(row["name"], []) for row in split_rows}, output,
                     f"{experiment.name}: seeds {first_half} against the rest", gathered.outputs,
                     primary_comparisons=declared)
        comparison = json.loads((output / "report.json").read_text())["comparison"]
        for row in comparison.tests:
            if row["role"] == PRIMARY and row["metric"] == PRIMARY_METRIC:
                found.append({"split": first_half, "model": row["a"].removesuffix(".first"), **row})
    print(f"{experiment.name}: {len(seeds)} seeds, {len(found) // max(1, len(splits(seeds)))} models, "
          f"{len(found)} comparisons of a recipe with itself (BLEU, seeds {SEEDS_A_SIDE} a side)\n")
    print("| model | seeds first | delta [95%] | p | Holm p (over the split's families) | verdict |")
    print("|---|---|---:|---:|---:|---|")
    for row in found:
        print(f"| {row['model']} | {', '.join(map(str, row['split']))} | {row['delta']:+.2f} "
              f"[{row['delta_low']:+.2f}, {row['delta_high']:+.2f}] | {row['p']:.3f} | {row['p_holm']:.3f} | "
              f"{'significant' if row['significant'] else 'not significant'} |")
    raw = sum(row["p"] < ALPHA for row in found)
    adjusted = sum(bool(row["significant"]) for row in found)
    print(f"\np below {ALPHA}: {raw} of {len(found)}; significant after Holm within each split: {adjusted} of "
          f"{len(found)} (at most 4 of 40 expected of a test that rejects 5% of true nulls: 2).\n")
    print("| model | translates | BLEU of each seed | mean | sd | hypothesis / reference length, each seed |")
    print("|---|---|---|---:|---:|---|")
    for model in dict.fromkeys(row["model"] for row in rows):
        runs = sorted((row for row in rows if row["model"] == model), key=lambda row: row["seed"])
        scores = [row["bleu"] for row in runs]
        lengths = []
        for row in runs:
            hypotheses, references = gathered.outputs[row["name"]]
            lengths.append(sum(len(line.split()) for line in hypotheses) / sum(len(line.split()) for line in references))
        print(f"| {model} | {', '.join(gate.judge(row)[0] for row in runs)} | "
              f"{', '.join(f'{score:.2f}' for score in scores)} | {statistics.fmean(scores):.2f} | "
              f"{statistics.stdev(scores):.2f} | {', '.join(f'{length:.3f}' for length in lengths)} |")


if __name__ == "__main__":
    main()
