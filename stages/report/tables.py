"""The comparison table as people read it (Markdown, HTML, a terminal) and as programs
read it (CSV, JSON). Missing values (a model not evaluated, no peak FLOP/s given)
show as "-" and stay empty/null in CSV and JSON.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Callable

import pandas as pd

from stages.report.comparison_records import Comparison
from stages.report.comparison_tables import Section, answer, appendix, count, sections
from stages.report.records import FIELDS, RunRecord


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"


def _fixed(digits: int) -> Callable[[float], str]:
    return lambda value: f"{value:,.{digits}f}"


# (header, record field, format) in display order.
COLUMNS: tuple[tuple[str, str, Callable], ...] = (
    ("model", "name", str),
    ("family", "family", str),
    ("precision", "precision", str),
    ("params", "parameters", count),
    ("non-emb params", "non_embedding_parameters", count),
    ("updates", "steps", str),
    ("stopped by", "stop_reason", str),
    ("train tokens", "train_tokens", count),
    ("time", "train_seconds", _duration),
    ("device-h", "device_hours", _fixed(3)),
    ("FLOPs counted", "train_flops", "{:.2e}".format),
    ("FLOPs 6ND", "train_flops_6nd", "{:.2e}".format),
    ("FLOPs time x peak", "train_flops_paper", "{:.2e}".format),
    ("GFLOP/s", "flops_per_second", lambda value: f"{value / 1e9:.1f}"),
    ("peak GFLOP/s", "peak_flops_per_worker", lambda value: f"{value / 1e9:,.1f}"),
    ("peak from", "peak_source", str),
    ("MFU", "mfu", "{:.1%}".format),
    ("valid ppl", "best_valid_ppl", _fixed(2)),
    ("valid BLEU", "best_valid_bleu", _fixed(2)),
    ("BLEU greedy", "greedy_bleu", _fixed(2)),
    ("BLEU beam", "bleu", _fixed(2)),
    ("BLEU lc beam", "bleu_lc", _fixed(2)),
    ("chrF greedy", "greedy_chrf", _fixed(2)),
    ("chrF beam", "chrf", _fixed(2)),
    ("translates", "translates", str),
    ("source use", "source_use", _fixed(3)),
    ("top line", "top_output_share", "{:.0%}".format),
    ("sent/s beam", "sentences_per_second", _fixed(1)),
    ("tok/s beam", "tokens_per_second", _fixed(0)),
    ("decode MFLOPs/sent", "decode_flops_per_sentence", lambda value: f"{value / 1e6:,.1f}"),
    ("CT2 weights", "ctranslate2_weights", str),
    ("BLEU CT2", "ctranslate2_bleu", _fixed(2)),
    ("sent/s CT2", "ctranslate2_sentences_per_second", _fixed(1)),
)


def display_table(records: list[RunRecord]) -> pd.DataFrame:
    """Formatted strings, one row per model, "-" where a value is missing."""
    rows = [[("-" if (value := getattr(record, field)) is None else fmt(value)) for _, field, fmt in COLUMNS]
            for record in records]
    return pd.DataFrame(rows, columns=[header for header, _, _ in COLUMNS])


def signature_lines(records: list[RunRecord]) -> list[str]:
    """The sacreBLEU signatures in use: one line each, with the models that share it."""
    lines = []
    for metric, field in (("BLEU", "sacrebleu_signature"),
                          ("BLEU lc (lowercased, as the literature reports)", "bleu_lc_signature"),
                          ("chrF", "chrf_signature")):
        signatures: dict[str, list[str]] = {}
        for record in records:
            if record.get(field):
                signatures.setdefault(getattr(record, field), []).append(record.name)
        lines += [f"{metric}: {signature}" + (f" ({', '.join(names)})" if len(signatures) > 1 else "")
                  for signature, names in signatures.items()]
    return lines


def warning_lines(records: list[RunRecord]) -> list[str]:
    """Each run's warnings (records.training_warnings, and the translation gate's reasons):
    a run that did not really train or does not translate, whose scores say little about
    its model."""
    return [line for record in records
            for line in (record.training_warnings or [])
            + ([f"{record.name} does not translate: " + "; ".join(record.gate_reasons)]
               if record.gate_reasons else [])]


def trained_on(record: RunRecord) -> str:
    """``trained in fp32 on AMD EPYC (AVX2, 1 thread(s) per worker), decoded in fp32``;
    where precision auto measured, how: ``trained in fp32 (auto, measured: fp32 1.26x as
    fast as bf16 (...)) on ...``."""
    threads = record.threads_per_worker
    chosen = f" (auto, {record.precision_reason})" if record.precision_reason else ""
    return (f"trained in {record.precision}{chosen} on {record.device_name} "
            f"({record.device_capability}{f', {threads} thread(s) per worker' if threads else ''})"
            + (f", decoded in {record.eval_precision}" if record.eval_precision else ""))


def hardware_lines(records: list[RunRecord]) -> list[str]:
    """What the models trained on and in which precision (and why, where auto chose it),
    and the peak FLOP/s their MFU and "time x peak" used, with where that peak came
    from: each distinct line once, naming the configured models it holds for every run
    of (every seed and budget), and single runs only where a model's runs differ."""
    trained: dict[str, list[RunRecord]] = {}
    peaks: dict[str, list[RunRecord]] = {}
    for record in records:
        if record.device_name:
            trained.setdefault(trained_on(record), []).append(record)
        if record.peak_flops_per_worker:
            # Artifacts made before peaks were measured took theirs from the config.
            detail = record.peak_detail or "train.peak_flops_per_worker"
            peaks.setdefault(f"peak {record.peak_flops_per_worker / 1e9:,.1f} GFLOP/s per worker, "
                             f"{record.peak_source}: {detail}", []).append(record)
    return [f"{_holders(runs, records)}: {text}" for described in (trained, peaks) for text, runs in described.items()]


def _holders(runs: list[RunRecord], records: list[RunRecord]) -> str:
    """``transformer, rnn_gru.w96.1e12.s1``: the configured models all of whose runs are
    among ``runs``, then the other runs by name."""
    names = {run.name for run in runs}
    whole, single = [], []
    for model in dict.fromkeys(run.model or run.name for run in runs):
        members = [record.name for record in records if (record.model or record.name) == model]
        if set(members) <= names:
            whole.append(model)
        else:
            single += [name for name in members if name in names]
    return ", ".join(whole + single)


def write_json(records: list[RunRecord], curves: dict[str, list[dict]], path: Path, title: str,
               comparison: Comparison | None = None) -> None:
    models = [record.to_json() for record in records]
    path.write_text(json.dumps({"title": title, "fields": list(FIELDS), "models": models, "curves": curves,
                                "comparison": comparison and comparison.to_json()}, indent=2, ensure_ascii=False))


def write_csv(records: list[RunRecord], path: Path) -> None:
    pd.DataFrame([record.to_json() for record in records], columns=list(FIELDS)).to_csv(path, index=False)


def _markdown_table(table: pd.DataFrame, left: int) -> str:
    # The cells are formatted already: tabulate must not re-parse "5.00e+13" as a number.
    align = ["left"] * left + ["right"] * (len(table.columns) - left)
    return table.to_markdown(index=False, disable_numparse=True, colalign=align)


APPENDIX = "appendix.md"


def markdown(records: list[RunRecord], title: str, plots: list[str], comparison: Comparison | None = None) -> str:
    """report.md, what a reader takes in at a glance: the answer first (each budget's
    ranking and the BLEU plot), whether each model translates, then the comparison's
    sections, the signatures and hardware once; the long tables are the appendix's."""
    first, rest = _split_plots(plots)
    parts = [f"# {title}", ""]
    parts += _markdown_sections(_answer_sections(comparison))
    parts += [f"![{name}]({name})\n" for name in first]
    warned = [f"- **Warning:** {line}" for line in warning_lines(records)]
    parts += warned + ([""] if warned else [])
    parts += _markdown_sections(sections(comparison) if comparison else [])
    held = [section.title for section in _appendix_sections(comparison)] + ["every run's row"]
    parts += [f"In [{APPENDIX}]({APPENDIX}): {_listed(held)}. As data: report.csv (a row per run) and "
              "report.json (the runs, their curves and the whole comparison).", ""]
    parts += [f"- sacreBLEU {line}" for line in signature_lines(records)]
    parts += [f"- {line}" for line in hardware_lines(records)]
    parts += [""] + [f"![{name}]({name})" for name in rest]
    return "\n".join(parts) + "\n"


def appendix_markdown(records: list[RunRecord], title: str, comparison: Comparison | None = None) -> str:
    """appendix.md: every selection candidate, the intervals on every metric, the
    secondary and exploratory comparisons, and every run's row with what its columns mean."""
    parts = [f"# {title}: appendix", ""]
    parts += _markdown_sections(_appendix_sections(comparison))
    parts += ["## Every run", "", _markdown_table(display_table(records), 2), "", NOTES, ""]
    return "\n".join(parts) + "\n"


def _markdown_sections(found: list[Section]) -> list[str]:
    return [line for section in found for line in (f"## {section.title}", "",
                                                   _markdown_table(section.table, section.text_columns), "",
                                                   section.note, "")]


def _listed(names: list[str]) -> str:
    names = [name[:1].lower() + name[1:] for name in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _answer_sections(comparison: Comparison | None) -> list[Section]:
    found = comparison and answer(comparison)
    return [found] if found else []


def _appendix_sections(comparison: Comparison | None) -> list[Section]:
    return appendix(comparison) if comparison else []


BLEU_VS_FLOPS = "bleu_vs_flops.png"  # drawn by plots.py


def _split_plots(plots: list[str]) -> tuple[list[str], list[str]]:
    """The BLEU-against-FLOPs plot goes with the answer; the others after the details."""
    return [name for name in plots if name == BLEU_VS_FLOPS], [name for name in plots if name != BLEU_VS_FLOPS]


def html_page(records: list[RunRecord], title: str, plots: list[str], comparison: Comparison | None = None) -> str:
    """report.md and appendix.md on one page, in their order, under a table of contents:
    the answer and the BLEU plot, the sections, the notes, then the appendix's tables."""
    first, rest = _split_plots(plots)

    leading, following = _answer_sections(comparison), sections(comparison) if comparison else []
    trailing = _appendix_sections(comparison)
    shown = [*leading, *following, *trailing]
    anchors = {section.title: f"s{index}" for index, section in enumerate(shown)}
    contents = "".join(f'<li><a href="#{anchors[section.title]}">{html.escape(section.title)}</a></li>'
                       for section in shown) + '<li><a href="#runs">Every run</a></li>'

    def html_section(section: Section) -> str:
        return (f'<h2 id="{anchors[section.title]}">{html.escape(section.title)}</h2>'
                f"{section.table.to_html(index=False, border=0, classes='report')}<p>{html.escape(section.note)}</p>")

    def images(names: list[str]) -> str:
        return "".join(f'<figure><img src="{html.escape(name)}" alt="{html.escape(name)}"></figure>' for name in names)

    warnings = "".join(f"<li><strong>Warning:</strong> {html.escape(line)}</li>" for line in warning_lines(records))
    notes = "".join(f"<li>sacreBLEU {html.escape(line)}</li>" for line in signature_lines(records))
    notes += "".join(f"<li>{html.escape(line)}</li>" for line in hardware_lines(records))
    table = display_table(records).to_html(index=False, border=0, classes="report")
    body = ("".join(html_section(section) for section in leading) + images(first)
            + (f"<ul>{warnings}</ul>" if warnings else "")
            + "".join(html_section(section) for section in following)
            + f"<ul>{notes}</ul>" + images(rest)
            + "".join(html_section(section) for section in trailing)
            + f'<h2 id="runs">Every run</h2>{table}<p>{html.escape(NOTES)}</p>')
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1><nav><ul>{contents}</ul></nav>"
            f"{body}</body></html>\n")


NOTES = ("BLEU: cased, detokenized (the headline); BLEU lc: lowercased, the kind Multi30k papers report; "
         "valid BLEU: the best BLEU on the validation split during training (greedy unless "
         "train.valid_bleu_beam says otherwise). "
         "FLOPs counted: matrix products of every update (stages/shared/models/flops.py), 3 x forward; "
         "6ND: Kaplan et al. (2020)'s 6 x parameters x tokens, side by side: the encoder's parameters x source "
         "tokens, the decoder's x target tokens (source and target for the decoder-only model), the output "
         "projection x target tokens, tied or not; embedding lookups left out; "
         "time x peak: training seconds x workers x peak FLOP/s per worker (Vaswani et al. 2017, table 2); "
         "the peak is measured on each worker by a matmul probe in the run's precision, taken from the "
         "datasheet for known GPUs, or set in the config ('peak from' says which). "
         "Decoding speed is per decoding task (one CPU thread under the runner); decode MFLOPs/sent: the "
         "beam search's estimated FLOPs per test sentence (the source's work once, the target's per hypothesis "
         "at the output's length), the cost to use a model beside the FLOPs that trained it. "
         "CT2: the same beam search on the same thread by the model exported to CTranslate2 with the weights "
         "shown (evaluate.ctranslate2); '-' where it was not asked for (evaluate.ctranslate2 unset), or where "
         "the family does not export: CTranslate2 runs Transformers only.")

STYLE = ("body{font-family:sans-serif;margin:2em} table.report{border-collapse:collapse} "
         "table.report td,table.report th{padding:4px 10px;text-align:right;border-bottom:1px solid #ddd} "
         "table.report td:nth-child(-n+2){text-align:left} img{max-width:640px}")
