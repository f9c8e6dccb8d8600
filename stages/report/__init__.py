"""report: every model of the experiment side by side, the classic comparison table.

One row per trained run (``records.FIELDS``): parameters, training tokens, time and
device-hours, training FLOPs counted three ways, achieved FLOP/s and MFU, best valid
perplexity, BLEU and chrF greedy and with the beam, decoding speed. Then the comparison
(``comparison.py``): each model's seeds together (mean, standard deviation), 95%
confidence intervals and paired significance tests that keep the seeds together
(``significance.py``, ``welch.py``, ``resampling.py``), verdicts on a declared family
of primary comparisons (``primary.py``), and with four or more budgets, each family's
best size per budget and the laws that predict it (``compute_laws.py``). Written as
``report.md`` (the answer and the details, short), ``appendix.md`` (the long tables),
``report.html`` (both on one page), ``report.csv`` and ``report.json`` (which also holds
each model's validation curve and the comparison), with PNG plots: BLEU against
training FLOPs, the IsoFLOP curves and envelope, and validation loss against training FLOPs and against
wall time. ``nmt report`` writes the same files for models gathered from several
configs or MLflow runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipeline.core.context import StageContext
from stages import tokenize
from stages.select.artifact import SelectionChoice, read_selection
from stages.shared.names import EVALUATE, SELECT, TRAIN, TUNE, evaluate_stage, train_stage
from stages.tune.artifact import TuneChoice, read_choice
from stages.report import records
from stages.shared import gate
from stages.report.comparison_records import Baselines, TunedModel
from stages.report.artifact import OUTPUT_FILES, evaluation_outputs
from stages.report.config import ReportStageConfig

# 5: seeds, confidence intervals, paired significance tests and the compute frontier;
# 6: decoding FLOPs per sentence; 7: CTranslate2's BLEU and sent/s, crossovers only at
# a BLEU from 0 to 100; 8: seeds resampled together (stages/report/resampling.py),
# two-sided p-values, a seed-level test, Holm over the report, human agreement estimated;
# 9: a lead's interval in the prose turned round where the first model is ahead;
# 10: runs stopped short of their FLOPs budget named in the seeds note and the prose;
# 11: each family's envelope and its saturating and power laws, judged by leave-one-out;
# FLOPs for a BLEU and crossovers only inside the measured range
# 12: each tuned model size's chosen learning rate and the loss of every rate tried
# 13: the envelope, IsoFLOP curves and laws judge each run by its last validation loss
# 14: figure legends off the data (one legend below the panels); the frontier names a
# family's model where it has one
# 15: one test per comparison with the seeds' and the test set's variance (t, Welch-
# Satterthwaite), a declared primary family with Holm over it alone, exploratory rows
# without verdicts, randomization with one coin per sentence, laws with undetermined
# bounds said so, judged against a line in log compute, seed-resampled intervals; the
# all-sizes BLEU law and its frontier figure gone; grid edges flagged
# 16: IsoFLOP profiles (a parabola per budget in log non-embedding parameters, N_opt and
# D_opt against compute with intervals; isoflop.png redrawn, optimal_size.png); a
# sentence per family on its tuned rates, lr_sensitivity.png a panel per family
# 17: a size whose run diverged (final validation loss over 1.1 times its best) left out
# of its IsoFLOP profile and named; the profiles' note gives the intervals' coverage
# 18: the IsoFLOP and learning-rate figures labelled at the sizes and rates measured
# 19: the IsoFLOP intervals' redraws also redraw the noise's spread for its degrees of freedom
# 20: a run that ended inside its warmup or whose training loss did not fall is warned of; the CT2
#     note says a "-" may be CTranslate2 not asked for; the BLEU plot keeps a greedy score in view
# 21: a run that wrote one sentence for half its test inputs or more is warned of
# 22: IsoFLOP draws whose minimum left the sizes count beyond them on their side (not
#     dropped); an exponent's bound can be open (null in report.json, ∞ in the table); the
#     table names the side to extend
# 23: the tuned-rates note names a size whose best trial's rate is at an edge though
#     tune.prefer_lower_within chose a rate inside
# 24: the translation gate (gate.py: source use and collapse) keeps runs that do not
#     translate out of verdicts, primary comparisons, profiles and laws; the target
#     side's n-gram baselines (ngram_baselines.py) beside the losses
# 25: the IsoFLOP exponents also in FLOPs per token (M = C / D_opt), and a lack-of-fit
#     test of the straight line: where it rejects, slopes between budgets and no exponent;
#     the primary comparisons' note says what a verdict is about, from the calibration
# 26: a model some of whose seeds translate and others not is "undecided: the seeds
#     disagree" (the withheld entries name the seeds that translate); an IsoFLOP panel
#     with no size in any profile says so; edge minima suggest the new widths (w192...)
# 27: the notes name the calibration benchmarks at their paths under benchmarks/statistics/
# 28: two systems are paired only on the same references (their sha256), else named unpaired
# 29: a verdict needs 3 seeds a side (2: the difference and its interval only); p printed
#     floored at 0.001; a row whose seeds agreed says what that assumes (seed_share); the
#     gate's "undecided" for a run within two standard errors of its threshold; each
#     precision and peak line once per model
# 30: with a selection, the BLEU plot draws a line per configured model through the
#     configuration chosen at each budget, each point named by it
# 31: report.md and report.html open with the answer (each budget's models ranked, the
#     next one's difference and the verdict; the BLEU plot); every run's row last;
#     report.html gets a table of contents; the console shows the answer
# 32: report.md holds the answer, whether each model translates, each selection's choice
#     and the details under 120 lines; every candidate, the intervals on every metric, the
#     secondary and exploratory comparisons and every run's row go to appendix.md
# 33: the BLEU plot's labels at one budget move apart where two models nearly tie
VERSION = 33
# The files of each upstream artifact the report reads (besides its manifest): never
# the train stage's checkpoints; of an evaluation, what the significance tests score.
READS = {TRAIN: ("metrics.jsonl",), EVALUATE: OUTPUT_FILES, TUNE: ("choice.json",), SELECT: ("choice.json",),
         "tokenize": ("index.json", "*.arrow")}  # the target side, for the n-gram baselines
MLFLOW_FILES = ("report.*", "appendix.md", "*.png")


def run(inputs: dict[str, Path], config: ReportStageConfig, output: Path, ctx: StageContext) -> dict:
    rows, curves, outputs = [], {}, {}
    for name in config.models:
        evaluation = inputs.get(evaluate_stage(name))
        record, curve = records.from_artifacts(name, inputs[train_stage(name)], evaluation, config.run_of.get(name))
        rows.append(record)
        curves[name] = curve
        found = evaluation and evaluation_outputs({file: (evaluation / file).read_bytes() for file in OUTPUT_FILES})
        if found:
            outputs[name] = found
    tuning = {stage.partition("/")[2]: read_choice(inputs[stage]) for stage in config.tuned}
    selection = [read_selection(inputs[stage]) for stage in config.selected]
    baselines = target_baselines(inputs["tokenize"]) if "tokenize" in inputs else None
    write_report(rows, curves, output, config.experiment, outputs, tuning, config.primary_comparisons, baselines,
                 selection)
    return {"models": len(rows)}


def target_baselines(tokenized: Path) -> Baselines:
    """The source-blind n-gram baselines (``ngram_baselines``) of a tokenize artifact's
    target side: fitted on its training split, scored on its validation split."""
    import pyarrow as pa

    from stages.report.ngram_baselines import baselines

    index = tokenize.read_index(tokenized)
    vocab = index["vocab"]

    def targets(split: str) -> list[list[int]]:
        rows = []
        for shard in index["splits"][split]["shards"]:
            with pa.ipc.open_stream(tokenized / shard["file"]) as reader:
                rows += reader.read_all().column("tgt_ids").to_pylist()
        # The models predict EOS after each target: counted here too.
        return rows if index["append_eos"] else [ids + [vocab["special_ids"]["eos"]] for ids in rows]

    return baselines(targets("train"), targets("valid"), vocab["sizes"]["tgt"], vocab["special_ids"]["bos"])


def write_report(rows: list[records.RunRecord], curves: dict[str, list[dict]], output: Path, title: str,
                 outputs: dict[str, tuple[list[str], list[str]]] | None = None,
                 tuning: dict[str, TuneChoice] | None = None, primary_comparisons: Sequence[Sequence[str]] = (),
                 baselines: Baselines | None = None, selection: Sequence[SelectionChoice] = ()) -> list[Path]:
    """The report's files in ``output``; any subset of models renders. ``outputs`` (run
    name -> hypotheses and references) adds intervals and significance tests, and lets
    the translation gate (``gate.py``) measure collapse where the evaluation did not;
    ``tuning`` (tuned model -> its tune stage's choice) the tuned learning rates;
    ``primary_comparisons`` (pairs of configured models) replaces the default primary
    family; ``baselines`` (``ngram_baselines.baselines``) the source-blind losses shown
    beside the models'; ``selection`` (each select stage's choice) the candidates the
    compared configurations were chosen among."""
    # Imported here: pandas, matplotlib and sacreBLEU load only when a report is written.
    from stages.report import tables
    from stages.report.comparison import compare
    from stages.report.plots import write_plots
    from stages.shared.output_collapse import collapse

    output.mkdir(parents=True, exist_ok=True)
    for row in rows:
        hypotheses = (outputs or {}).get(row.name, ((), ()))[0]
        if row.top_output_share is None and hypotheses:  # evaluated before it was measured
            row.update(collapse(list(hypotheses)))
        row.translates, row.gate_reasons = gate.judge(row)
    families = {row.model: row.family for row in rows}
    tuned = [TunedModel(model=model, choice=choice, family=families.get(model) or model.split(".")[0])
             for model, choice in (tuning or {}).items()]
    comparison = compare(rows, outputs or {}, primary_comparisons, baselines=baselines, tuning=tuned,
                         selection=selection)
    plots = write_plots(rows, curves, output, title, comparison)
    tables.write_json(rows, curves, output / "report.json", title, comparison)
    tables.write_csv(rows, output / "report.csv")
    (output / "report.md").write_text(tables.markdown(rows, title, plots, comparison), encoding="utf-8")
    (output / tables.APPENDIX).write_text(tables.appendix_markdown(rows, title, comparison), encoding="utf-8")
    (output / "report.html").write_text(tables.html_page(rows, title, plots, comparison), encoding="utf-8")
    return [output / name for name in ("report.md", tables.APPENDIX, "report.html", "report.csv", "report.json",
                                       *plots)]
