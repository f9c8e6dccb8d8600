"""``nmt inspect``: parameters and FLOPs per token of every model in a config, and what
its graph will spend (pipeline/compute_estimate.py)."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from pipeline.commands.output import fail, load_experiment, open_store, table_console
from pipeline.compute_estimate import MEASURED_MFU, estimate, gpu_hours, hours_by_measured_mfu
from pipeline.config import ExperimentConfig
from pipeline.core.artifacts import ArtifactState
from pipeline.graph import find_stage
from pipeline.selection import plan_experiment
from stages.shared.models.families import family
from stages.shared.models.flops import cost_summary
from stages.tokenize import read_index


def inspect_models(config: Path, overrides: list[str], artifact_root: str | None, src_len: float | None,
                   tgt_len: float | None, gpu: str | None = None, mfu: float | None = None) -> None:
    experiment = load_experiment(config, overrides)
    if not experiment.models:
        fail(f"{config}: no 'models' section to inspect", 2)
    store = open_store(experiment, artifact_root)
    tokenize = find_stage(plan_experiment(experiment, store), "tokenize")
    src_vocab = tgt_vocab = experiment.bpe.vocab_size
    source = "bpe.vocab_size from the config; lengths default to 25 (run the data stages for real ones)"
    mean_src = mean_tgt = 25.0
    if tokenize.status.state == ArtifactState.CACHED:
        index = read_index(store.local_path("tokenize", tokenize.key))
        train_split, vocab = index["splits"]["train"], index["vocab"]
        src_vocab, tgt_vocab = vocab["sizes"]["src"], vocab["sizes"]["tgt"]
        mean_src = train_split["src_tokens"] / train_split["pairs"]
        mean_tgt = train_split["tgt_tokens"] / train_split["pairs"]
        source = f"vocabulary and mean lengths of tokenize artifact {tokenize.key}"
    if src_len and tgt_len:  # the lengths asked for, not the ones named above
        source = (f"the vocabulary of tokenize artifact {tokenize.key}"
                  if tokenize.status.state == ArtifactState.CACHED else "bpe.vocab_size from the config")
        source += "; lengths as given"
    src_len, tgt_len = src_len or mean_src, tgt_len or mean_tgt
    table = Table("model", "family", "preset", "params", "embedding", "non-embedding", "fwd FLOPs/tok",
                  "train FLOPs/tok", "6ND/tok", title=f"{experiment.name}: {src_len:.1f} source and {tgt_len:.1f} "
                  f"target tokens per pair")
    parameters = {}
    for spec in (sized for model in experiment.models for sized in model.at_sizes()):  # one row per size
        try:  # counted from the config, without building the model (or importing torch)
            config = family(spec.family).resolve(spec.preset, spec.settings)
            cost = cost_summary(spec.family, config, src_vocab, tgt_vocab, src_len, tgt_len)
        except ValueError as error:
            fail(f"model {spec.name!r}: {error}", 2)
        parameters[spec.name] = cost["total"]
        table.add_row(spec.name, spec.family, spec.preset, *(_count(cost[k]) for k in
                      ("total", "embedding", "non_embedding", "forward_flops_per_tgt_token",
                       "train_flops_per_tgt_token", "six_nd_per_tgt_token")))
    table_console().print(table)
    table_console().print(f"Sizes from {source}. FLOPs count matrix products (stages/shared/models/flops.py); "
                          "training = 3 x forward; 6ND = Kaplan et al. (2020)'s 6 x parameters x tokens, side by side: "
                          "encoder x source, decoder x target (both for decoder-only), output projection x target; "
                          "per target token here.")
    _print_compute(experiment, gpu, mfu, parameters)


def _print_compute(experiment: ExperimentConfig, gpu: str | None, mfu: float | None,
                   parameters: dict[str, float]) -> None:
    """The graph's counted FLOPs, and on GPUs (``train.use_gpu``, or ``--gpu``) the
    GPU-hours they come to: at ``mfu`` where given, else at the MFU measured for each
    size (``parameters``: <model>.<size> -> its total parameters)."""
    console = table_console()
    if experiment.select is not None and experiment.chosen is None:
        _print_selection_compute(experiment)
        return
    spent = estimate(experiment)
    if spent is None:
        return
    console.print(f"Compute: {spent.runs} runs, {spent.run_flops:.2e} counted training FLOPs; {spent.tune_stages} "
                  f"tune stages, {spent.trials} trials, {spent.tune_flops:.2e}; total {spent.total_flops:.2e} "
                  "(trials to full length: ASHA's early stops make it less, a grid extended past an edge more; "
                  "validation and decoding not counted).")
    if gpu is None and not experiment.train.use_gpu:
        return
    try:
        rate = gpu_hours(gpu or "H100", experiment.train.precision, mfu or MEASURED_MFU[0][1])
    except ValueError as error:
        fail(str(error), 2)
    peak = f"one {rate.gpu}'s {rate.precision} peak ({rate.peak_flops / 1e12:,.0f} TFLOP/s, the datasheet's)"
    if mfu is not None:
        runs, tuning = rate.of(spent.run_flops), rate.of(spent.tune_flops)
        console.print(f"GPU-hours at {mfu:.1%} MFU of {peak}: {_hours(runs + tuning)} (runs {_hours(runs)}, "
                      f"tuning {_hours(tuning)}); --gpu and --mfu set the assumption.")
        return
    runs, tuning = hours_by_measured_mfu(spent, rate, parameters)
    measured = ", ".join(f"{mfu:.2%} at {_count(size)}" for size, mfu in MEASURED_MFU)
    console.print(f"GPU-hours at the MFU the train stage measured on an H100 for each size's parameters "
                  f"({measured} parameters; interpolated between, the nearest outside) of {peak}: "
                  f"{_hours(runs + tuning)} (runs {_hours(runs)}, tuning {_hours(tuning)}); --mfu assumes one "
                  "MFU for every size instead.")
    share = experiment.train.gpus_per_worker
    if share < 1:
        console.print(f"Each MFU was measured for one run on a whole GPU; this config puts {round(1 / share)} runs on "
                      f"a GPU (train.gpus_per_worker {share:g}), whose rate together was not measured: at best, "
                      f"{_hours((runs + tuning) * share)} GPU-hours.")


def _print_selection_compute(experiment: ExperimentConfig) -> None:
    """A select config's first round of candidates, and what confirming its choice
    costs: with branched budgets, as little as every model's largest budget plus the
    others' decays (one configuration chosen at every budget), as much as each budget's
    own run (a configuration of its own at each)."""
    candidates = estimate(experiment.selecting())
    if candidates is None:
        return
    budgets, runs = sorted(experiment.budgets), len(experiment.models) * len(experiment.seeds)
    most = runs * sum(budgets)
    least = runs * (budgets[-1] + experiment.train.decay_fraction * sum(budgets[:-1])) \
        if experiment.branch_budgets else most
    confirming = f"{most:.2e}" if least == most else f"{least:.2e} to {most:.2e}"
    table_console().print(f"Compute: the selection's first round, {candidates.runs} runs, {candidates.run_flops:.2e} "
                          f"counted training FLOPs (a choice at an edge adds rounds); confirming the choice on "
                          f"{len(experiment.seeds)} seeds, {confirming}; validation and decoding not counted.")


def _hours(value: float) -> str:
    return f"{value:,.1f}" if value >= 1 else f"{value:.2g}"


def _count(value: float) -> str:
    """Millions, or thousands below a million (the frontier's w8 has 5k non-embedding parameters)."""
    return f"{value / 1e6:,.2f}M" if value >= 1e6 else f"{value / 1e3:,.1f}k"
