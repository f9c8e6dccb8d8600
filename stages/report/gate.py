"""The translation gate: does a run translate? A model that has not learned to read its
source scores a few BLEU by writing the target side's likeliest words; its score says
nothing about its architecture, so such a run is marked in every table and kept out of
every verdict, primary comparison, frontier, IsoFLOP profile and law.

A run translates when both hold (the evaluate stage measures them,
``stages/evaluate/translation_check.py``):

- its **source use** is at least ``SOURCE_USE_MIN`` nats per target token: the
  validation targets' cross-entropy rises by that much when each sentence is given
  another sentence's source;
- at most ``TOP_OUTPUT_MAX`` of its test outputs are its most frequent output line.

docs/comparing.md says how the thresholds were set from measured runs. A run evaluated
before the evaluate stage measured source use is "not checked": it is shown, marked so,
and the report says its verdicts were not gated.
"""

from __future__ import annotations

# Nats per target token. Runs that translate measured far above it and runs that wrote
# one sentence far below (docs/comparing.md, "Does a run translate?").
SOURCE_USE_MIN = 0.25
# The share of test inputs given the run's most frequent output line.
TOP_OUTPUT_MAX = 0.10

TRANSLATES, DOES_NOT, NOT_CHECKED = "yes", "no", "not checked"


def judge(record: dict) -> tuple[str, list[str]]:
    """(``TRANSLATES``, ``DOES_NOT`` or ``NOT_CHECKED``, the reasons it does not), from a
    run record's ``source_use`` and ``top_output_share``."""
    reasons = []
    share = record.get("top_output_share")
    if share is not None and share > TOP_OUTPUT_MAX:
        shown = record.get("top_output") or ""
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        reasons.append(f"{share:.0%} of its test outputs are one line (\"{shown}\"; at most "
                       f"{TOP_OUTPUT_MAX:.0%} allowed)")
    use = record.get("source_use")
    if use is not None and use < SOURCE_USE_MIN:
        reasons.append(f"its source use is {use:.3f} nats per target token (at least {SOURCE_USE_MIN} needed)")
    if reasons:
        return DOES_NOT, reasons
    return (NOT_CHECKED if use is None or share is None else TRANSLATES), []


def group_verdict(runs: list[dict]) -> str:
    """A configured model at one budget translates when every seed does: one seed that
    does not makes the seeds' mean a mix of two kinds of model."""
    verdicts = {run.get("translates") or NOT_CHECKED for run in runs}
    if DOES_NOT in verdicts:
        return DOES_NOT
    return NOT_CHECKED if NOT_CHECKED in verdicts else TRANSLATES


def failing_seeds(runs: list[dict]) -> str:
    """``seed 2: its source use is ...; seed 3: ...``: why each failing seed failed."""
    return "; ".join(f"seed {run.get('seed')}: " + " and ".join(run.get("gate_reasons") or [])
                     for run in runs if run.get("translates") == DOES_NOT)
