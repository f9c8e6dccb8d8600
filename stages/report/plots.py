"""The report's figures as PNG files: quality against compute and time, one mark or
curve per model, drawn with matplotlib's file-only backend (no display needed). Every
validation-loss axis carries the target side's source-blind n-gram losses as grey lines
(``draw_baselines``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.ticker import NullFormatter  # noqa: E402
from matplotlib.typing import ColorType  # noqa: E402

from stages.report.comparison_tables import count  # noqa: E402
from stages.report.comparison_records import Comparison  # noqa: E402
from stages.report.records import RunRecord  # noqa: E402
from stages.report.tables import BLEU_VS_FLOPS  # noqa: E402


LOSS_VS_FLOPS = "valid_loss_vs_flops.png"
LOSS_VS_TIME = "valid_loss_vs_time.png"
BLEU_CURVES = "bleu_curves.png"
ISOFLOP = "isoflop.png"
OPTIMAL_SIZE = "optimal_size.png"
ENVELOPE = "envelope.png"
LR_SENSITIVITY = "lr_sensitivity.png"


def write_plots(records: list[RunRecord], curves: dict[str, list[dict]], directory: Path, title: str,
                comparison: Comparison | None = None) -> list[str]:
    """The PNG files written into ``directory``, by name."""
    written = []
    evaluated = [record for record in records if record.bleu is not None]
    if evaluated:
        _bleu_vs_flops(evaluated, comparison, directory / BLEU_VS_FLOPS, title)
        written.append(BLEU_VS_FLOPS)
    if comparison and comparison.isoflop:
        _save(isoflop_figure(comparison, title), directory / ISOFLOP)
        _save(optimal_size_figure(comparison, title), directory / OPTIMAL_SIZE)
        written += [ISOFLOP, OPTIMAL_SIZE]
    if comparison and comparison.laws:
        _save(envelope_figure(comparison, title), directory / ENVELOPE)
        written.append(ENVELOPE)
    if comparison and comparison.tuning:
        _save(lr_sensitivity_figure(comparison, title), directory / LR_SENSITIVITY)
        written.append(LR_SENSITIVITY)
    if any(curves.get(record.name) for record in records):
        _curves(records, curves, "train_flops", "training FLOPs (counted)", directory / LOSS_VS_FLOPS, title,
                comparison)
        _curves(records, curves, "train_seconds", "training time (s)", directory / LOSS_VS_TIME, title, comparison)
        written += [LOSS_VS_FLOPS, LOSS_VS_TIME]
    if any("valid_bleu" in point for record in records for point in curves.get(record.name) or []):
        _bleu_curves(records, curves, directory / BLEU_CURVES, title, comparison)
        written.append(BLEU_CURVES)
    return written


def isoflop_figure(comparison: Comparison, title: str):
    """One column per family with IsoFLOP profiles: validation loss (top) and BLEU
    (bottom) against non-embedding parameters, one curve per budget through its sizes'
    means over seeds; on the loss panels each budget's fitted parabola and, where it is
    interior, its minimum (a star)."""
    import numpy as np

    entries = comparison.isoflop
    figure, grid = plt.subplots(2, len(entries), figsize=(4.2 * len(entries), 7.4), squeeze=False,
                                layout="constrained")
    groups = {(group.model, group.budget): group for group in comparison.groups}
    for column, entry in enumerate(entries):
        for profile in entry.profiles:
            sizes = profile["sizes"]
            x = [size["non_embedding_parameters"] for size in sizes]
            axes = grid[0][column]
            (line,) = axes.plot(x, [size["valid_loss"] for size in sizes], marker=marker_of(entry.family),
                                markersize=4, linestyle="none", label=f"{profile['budget']:.2g} FLOPs")
            if profile.get("coefficients"):
                smooth = np.geomspace(min(x), max(x), 60)
                axes.plot(smooth, np.polyval(profile["coefficients"], np.log10(smooth)), color=line.get_color(),
                          linewidth=1)
            if profile["optimum"]:
                best = profile["optimum"]["parameters"]
                axes.plot([best], [np.polyval(profile["coefficients"], np.log10(best))], marker="*", markersize=12,
                          color=line.get_color())
            bleu = [groups[(size["model"], profile["budget"])].bleu.mean for size in sizes]
            if any(value is not None for value in bleu):
                grid[1][column].plot(x, [np.nan if value is None else value for value in bleu],
                                     marker=marker_of(entry.family), markersize=4, color=line.get_color())
        draw_baselines(grid[0][column], comparison)
        measured = [size["non_embedding_parameters"] for profile in entry.profiles for size in profile["sizes"]]
        for row, label in enumerate(("validation loss (nats per target token)", "BLEU (beam)")):
            axes = grid[row][column]
            if measured:
                axes.set_xscale("log")
                _ticks_at(axes, measured, count)
            else:  # every size left out at every budget (did not translate, diverged): nothing to scale
                axes.text(0.5, 0.5, "no size in a profile", ha="center", va="center", transform=axes.transAxes)
                axes.set_xticks([])
            axes.set_xlabel("non-embedding parameters")
            axes.set_ylabel(label)
            axes.grid(True, which="both", alpha=0.3)
        grid[0][column].set_title(entry.family)
    # One legend for every panel, below them: the budgets take the same colours in each.
    handles, labels = grid[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8)
    figure.suptitle(f"{title}: IsoFLOP profiles (lines: parabolas in log parameters; stars: interior minima)")
    return figure


def optimal_size_figure(comparison: Comparison, title: str):
    """N_opt (non-embedding parameters) and D_opt (tokens) against counted FLOPs: each
    family's interior minima with their intervals and the fitted power law, or, where
    the lack-of-fit test rejected the line, the minima joined by a dotted line."""
    import numpy as np

    figure, grid = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
    for entry in comparison.isoflop:
        for axes, what, interval in ((grid[0], "parameters", "interval"), (grid[1], "tokens", "tokens_interval")):
            points = [(p["budget"], p["optimum"]) for p in entry.profiles if p["optimum"] and p["optimum"].get(what)]
            if not points:
                continue
            budgets = [budget for budget, _ in points]
            values = [optimum[what] for _, optimum in points]
            low = [value - optimum.get(interval, [value, value])[0] for value, (_, optimum) in zip(values, points)]
            high = [optimum.get(interval, [value, value])[1] - value for value, (_, optimum) in zip(values, points)]
            (line,) = axes.plot([], [])
            axes.errorbar(budgets, values, yerr=[low, high], fmt=marker_of(entry.family), color=line.get_color(),
                          capsize=2)
            fitted = entry[what]
            rejected = (fitted.get("lack_of_fit") or {}).get("rejects")
            if fitted["exponent"] is not None and not rejected:
                span = np.geomspace(min(fitted["budgets"]), max(fitted["budgets"]), 20)
                line.set_data(span, fitted["coefficient"] * span ** fitted["exponent"])
                line.set_label(f"{entry['family']}: exponent {fitted['exponent']:.2f}")
            elif rejected:  # no single exponent: the optima joined budget to budget
                line.set_data(budgets, values)
                line.set_linestyle(":")
                line.set_label(f"{entry['family']}: no straight line (p {fitted['lack_of_fit']['p']:.2g})")
    for axes, label in ((grid[0], "N_opt, non-embedding parameters"), (grid[1], "D_opt, training tokens")):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("training FLOPs (counted)")
        axes.set_ylabel(label)
        axes.grid(True, which="both", alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=8)
    figure.suptitle(f"{title}: compute-optimal size and tokens (bars: 95% intervals)")
    return figure


def envelope_figure(comparison: Comparison, title: str):
    """Every family's envelope on one figure: validation loss against training FLOPs,
    the best size's mean at each budget (bars: its seeds' sample standard deviation),
    and its saturating law over the FLOPs measured only."""
    import numpy as np

    from stages.report.compute_laws import law_of

    figure, axes = plt.subplots(figsize=(6.4, 4.4))
    for entry in comparison.laws:
        groups = {(group.budget, group.model): group for group in comparison.groups}
        points = [groups[(point.budget, point.model)] for point in entry.envelope]
        (line,) = axes.plot([], [])
        # The envelope holds the sizes with a validation loss: each point's mean is a number.
        axes.errorbar([g.train_flops for g in points], [cast(float, g.valid_loss.mean) for g in points],
                      yerr=[g.valid_loss.std or 0.0 for g in points], fmt=marker_of(entry.family),
                      color=line.get_color(), capsize=0)
        law = law_of(entry)
        if law is not None:
            flops = np.geomspace(law.valid_from, law.valid_to, 40)
            line.set_data(flops, law(flops))
            floor = "E not determined" if (entry.valid_loss or {})["saturating"].get("E_at_bound") else f"E {law.E:.2f}"
            line.set_label(f"{entry.family}: {floor}, alpha {law.alpha:.2f}")
    draw_baselines(axes, comparison)
    axes.set_xscale("log")
    axes.set_xlabel("training FLOPs (counted)")
    axes.set_ylabel("validation loss, best size (nats per target token)")
    axes.set_title(f"{title}: each family's envelope")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    return figure


@dataclass(frozen=True)
class _Point:
    """What the BLEU plot draws of a model at a budget: a comparison's group (its seeds'
    mean), or a single run where there is no comparison."""

    label: str
    model: str
    family: str
    train_flops: float
    budget: float | None  # the FLOPs budget it trained to; its runs stop within an update of it
    bleu: float
    translates: str | None


def _bleu_vs_flops(records: list[RunRecord], comparison: Comparison | None, path: Path, title: str) -> None:
    """Test BLEU (beam) against counted training FLOPs, a line per configured model
    through its seeds' mean at each budget, a band over the 95% interval of the seeds and
    the test set (``comparison.intervals``) where it was computed. With a selection, a
    configured model's line runs through the configuration chosen at each budget, each
    point named by its size and rate. A model at a budget that does not translate, or is
    undecided (``gate.py``), is drawn hollow."""
    from stages.shared.gate import ranked

    found = [_Point(group.label, group.model, group.family, group.train_flops, group.budget, group.bleu.mean,
                    group.translates)
             for group in (comparison.groups if comparison else []) if group.bleu.mean is not None] or \
        [_Point(record.name, record.name, record.family or record.name, record.train_flops, record.budget, record.bleu,
                record.translates) for record in records if record.bleu is not None and record.train_flops is not None]
    intervals = comparison.intervals if comparison else {}
    figure, axes = plt.subplots(figsize=(6.8, 4.8), layout="constrained")
    # A confirming run is named <model>.<size>.lr<rate> after the choice it trains.
    chosen = {f"{choice.model}.{at.size}.lr": choice.model
              for choice in (comparison.selection if comparison else None) or [] for at in choice.budgets
              if at.size is not None}

    def line_of(model: str) -> str:
        return next((name for prefix, name in chosen.items() if model.startswith(prefix)), model)

    labels: list[tuple[_Point, str, ColorType]] = []  # (point, text, colour), drawn after the lines
    for line_name in dict.fromkeys(line_of(point.model) for point in found):
        points = sorted((point for point in found if line_of(point.model) == line_name),
                        key=lambda point: point.train_flops)
        x = [point.train_flops for point in points]
        (line,) = axes.plot(x, [point.bleu for point in points], linewidth=1, label=line_name)
        colour, marker = line.get_color(), marker_of(points[0].family)
        for point in points:
            hollow = not ranked(point.translates)
            axes.scatter(point.train_flops, point.bleu, marker=marker, s=50, zorder=3,
                         facecolors="none" if hollow else colour, edgecolors=colour)
            if line_name != point.model:  # the configuration chosen there: w24.lr3.2e-2
                labels.append((point, point.model[len(line_name) + 1:], colour))
        bands = [band for point in points if (band := intervals.get(point.label, {}).get("BLEU"))]
        if len(bands) == len(points):
            axes.fill_between(x, [band.low for band in bands], [band.high for band in bands], color=colour,
                              alpha=0.15, linewidth=0)
    axes.set_xscale("log")
    # Room on both sides: models trained at equal FLOPs would otherwise sit on an axis
    # spanning a fraction of a percent; BLEU from 0 so the gaps are not exaggerated.
    flops = [point.train_flops for point in found]
    axes.set_xlim(min(flops) / 2, max(flops) * 2)
    highest = max([point.bleu for point in found]
                  + [band.high for point in found if (band := intervals.get(point.label, {}).get("BLEU"))])
    axes.set_ylim(0, highest * 1.1 + 0.5)
    _spread_labels(axes, labels, min_gap=0.04 * (highest * 1.1 + 0.5))
    axes.set_xlabel("training FLOPs (counted)")
    axes.set_ylabel("test BLEU (beam)")
    axes.set_title(f"{title}\nbands: 95% intervals; hollow: does not translate", fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    figure.legend(loc="outside lower center", ncol=min(len(axes.get_lines()), 4), fontsize=8)
    _save(figure, path)


def _spread_labels(axes, labels: list[tuple[_Point, str, ColorType]], min_gap: float) -> None:
    """Each point's label beside it; at one budget, a label within ``min_gap`` (BLEU) below
    the one above it moves down a line, so that two families that tie stay readable."""
    for budget in dict.fromkeys(point.budget for point, _, _ in labels):
        above, shift = None, 0
        at_budget = sorted((label for label in labels if label[0].budget == budget), key=lambda label: -label[0].bleu)
        for point, text, colour in at_budget:
            shift = shift + 1 if above is not None and above - point.bleu < min_gap else 0
            axes.annotate(text, (point.train_flops, point.bleu), xytext=(6, -3 - 9 * shift),
                          textcoords="offset points", fontsize=7, color=colour)
            above = point.bleu


def draw_baselines(axes, comparison: Comparison | None) -> None:
    """The source-blind n-gram models' validation losses (``ngram_baselines``) as grey
    horizontal lines, each named at its right end: what a model that never reads the
    source achieves."""
    from stages.report.ngram_baselines import NAMES

    found = comparison and comparison.baselines
    if not found:
        return
    for order, loss in found.nats_per_token.items():
        if int(order) == 1:  # far above every trained model's loss: it would squash the axis
            continue
        axes.axhline(loss, color="grey", linestyle=":", linewidth=1)
        axes.annotate(f"{NAMES.get(int(order), order)} {loss:.2f}", (1.0, loss), xycoords=("axes fraction", "data"),
                      xytext=(-4, 2), textcoords="offset points", ha="right", fontsize=7, color="grey")


def _curves(records: list[RunRecord], curves: dict[str, list[dict]], x_field: str, x_label: str, path: Path,
            title: str, comparison: Comparison | None = None) -> None:
    # The legend below the axes, as many columns as fit: a sweep's dozens of runs would
    # cover the curves inside them.
    figure, axes = plt.subplots(figsize=(7.2, 5.0), layout="constrained")
    draw_baselines(axes, comparison)
    for record in records:
        points = [point for point in curves.get(record.name) or [] if "valid_loss" in point]
        if points:
            axes.plot([p[x_field] for p in points], [p["valid_loss"] for p in points],
                      marker=marker_of(record.family), markersize=3, label=record.name)
    if x_field == "train_flops":
        axes.set_xscale("log")
    axes.set_xlabel(x_label)
    axes.set_ylabel("validation loss (nats per target token)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    figure.legend(loc="outside lower center", ncol=4 if len(records) > 8 else 2, fontsize=6)
    _save(figure, path)


def _bleu_curves(records: list[RunRecord], curves: dict[str, list[dict]], path: Path, title: str,
                 comparison: Comparison | None = None) -> None:
    """Validation loss (left) next to BLEU during training (right): the validation
    split solid, the fixed sample of training pairs dashed, against updates. One legend
    below both panels, one entry per run (its colour and marker) and two for the line
    styles, so that it never covers the curves however many runs there are."""
    from matplotlib.lines import Line2D

    figure, (loss_axes, bleu_axes) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    draw_baselines(loss_axes, comparison)
    runs = []
    for record in records:
        points = curves.get(record.name) or []
        marker = marker_of(record.family)
        losses = [point for point in points if "valid_loss" in point]
        line, = loss_axes.plot([p["step"] for p in losses], [p["valid_loss"] for p in losses], marker=marker,
                               markersize=3)
        runs.append(Line2D([], [], color=line.get_color(), marker=marker, markersize=4, label=record.name))
        scored = [point for point in points if "valid_bleu" in point]
        bleu_axes.plot([p["step"] for p in scored], [p["valid_bleu"] for p in scored], marker=marker,
                       markersize=3, color=line.get_color())
        sampled = [point for point in scored if "train_bleu" in point]
        if sampled:
            bleu_axes.plot([p["step"] for p in sampled], [p["train_bleu"] for p in sampled], linestyle="--",
                           color=line.get_color())
    styles = [Line2D([], [], color="grey", label="validation split"),
              Line2D([], [], color="grey", linestyle="--", label="training sample")]
    loss_axes.set_ylabel("validation loss (nats per target token)")
    bleu_axes.set_ylabel("BLEU during training (decoded, sacreBLEU)")
    for axes in (loss_axes, bleu_axes):
        axes.set_xlabel("updates")
        axes.grid(True, alpha=0.3)
    handles = runs + styles
    figure.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 5), fontsize=7)
    figure.suptitle(title)
    _save(figure, path)


def lr_sensitivity_figure(comparison: Comparison, title: str):
    """Per family, best validation loss against the learning rate, one line per tune
    stage (a size, or a size at one trial budget: ``w24.2.5e11``), the chosen rate
    ringed; rates without a finite loss are left out."""
    tuned = comparison.tuning or []
    families = list(dict.fromkeys(entry.family for entry in tuned))
    figure, grid = plt.subplots(1, len(families), figsize=(4.4 * len(families), 4.2), squeeze=False,
                                layout="constrained")
    for axes, family_name in zip(grid[0], families):
        for entry in tuned:
            if entry.family != family_name:
                continue
            points = sorted((trial["lr"], trial["best_valid_loss"]) for trial in entry.choice.trials
                            if trial["best_valid_loss"] is not None)
            if not points:
                continue
            label = entry.model.partition(".")[2] or entry.model
            line, = axes.plot(*zip(*points), marker="o", markersize=4, label=label)
            chosen = [loss for rate, loss in points if rate == entry.choice.lr]
            axes.scatter([entry.choice.lr] * len(chosen), chosen, s=140, facecolors="none", edgecolors=line.get_color())
        axes.set_xscale("log")
        tried = [trial["lr"] for entry in tuned if entry.family == family_name
                 for trial in entry.choice.trials]
        _ticks_at(axes, tried, lambda rate: f"{rate:g}")
        axes.set_xlabel("peak learning rate")
        axes.set_title(family_name)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize="small")
    grid[0][0].set_ylabel("best validation loss (tuning budget)")
    figure.suptitle(f"{title}: learning rate per size, chosen rate ringed")
    return figure


def _save(figure, path: Path) -> None:
    if figure.get_layout_engine() is None:  # a figure laid out as it was made (constrained) keeps that
        figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def marker_of(family_name: str | None) -> str:
    """The family's marker (``ModelFamily.plot_marker``); a diamond for a family this
    code does not know (a run recorded by another version, or without a family)."""
    from stages.shared.models.families import FAMILIES

    return next((f.plot_marker for f in FAMILIES if f.name == family_name), "D")


def _ticks_at(axes, values: list[float], label) -> None:
    """A log x axis labelled at the values measured, and nowhere else: over less than a
    decade matplotlib labels its minor ticks (2x10^4, 3x10^4, ...), which overlapped."""
    values = sorted(set(values))
    if values:
        axes.set_xticks(values, [label(value) for value in values], rotation=45 if len(values) > 4 else 0)
        axes.xaxis.set_minor_formatter(NullFormatter())
