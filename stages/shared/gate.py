"""The translation gate: does a run translate? A model that has not learned to read its
source scores a few BLEU by writing the target side's likeliest words; its score says
nothing about its architecture, so such a run is marked in every table and kept out of
every verdict, primary comparison, frontier, IsoFLOP profile and law.

A run translates when both hold (the evaluate stage measures them,
``stages/shared/translation_check.py``):

- its **source use** is at least ``SOURCE_USE_MIN`` nats per target token: the
  validation targets' cross-entropy rises by that much when each sentence is given
  another sentence's source;
- at most ``TOP_OUTPUT_MAX`` of its test outputs are its most frequent output line.

Source use is a measurement on a sample of sentences, with its standard error
(``source_use_error``): a run within ``MARGIN_ERRORS`` standard errors of
``SOURCE_USE_MIN`` is "undecided", since another draw of validation sentences could put
it on either side; it is withheld like a run that does not translate, and the report
says why. docs/comparing.md says how the thresholds were set from measured runs. A run
evaluated before the evaluate stage measured source use is "not checked": it is shown,
marked so, and the report says its verdicts were not gated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.core.records import FieldAccess

# A run's record (the report's RunRecord) or the dict of its fields: read by name.
Record = Mapping[str, Any] | FieldAccess

# Nats per target token, between what runs that translate and runs that wrote one
# sentence measured; not always far from either: in the default job two runs lay 0.011
# nats apart on either side of it (0.240 and 0.251), less than one recipe's seeds
# differ (a median of 0.035), so a run near it is judged with its standard error
# (MARGIN_ERRORS) rather than by which side it fell on (docs/comparing.md, "Does a run
# translate?").
SOURCE_USE_MIN = 0.25
# A run whose source use is within this many standard errors of SOURCE_USE_MIN is undecided.
MARGIN_ERRORS = 2.0
# The share of test inputs given the run's most frequent output line.
TOP_OUTPUT_MAX = 0.10

TRANSLATES, DOES_NOT, UNDECIDED, NOT_CHECKED = "yes", "no", "undecided", "not checked"


def ranked(verdict: str | None) -> bool:
    """Whether a run or group with this verdict takes part in tests, profiles and laws:
    every verdict but ``DOES_NOT`` and ``UNDECIDED``."""
    return verdict not in (DOES_NOT, UNDECIDED)


def judge(record: Record) -> tuple[str, list[str]]:
    """(``TRANSLATES``, ``DOES_NOT``, ``UNDECIDED`` or ``NOT_CHECKED``, the reasons it
    does not or may not), from a run record's ``source_use`` (with ``source_use_error``)
    and ``top_output_share``. A collapse decides alone: it is counted on the test
    outputs themselves, not estimated from a sample."""
    reasons = []
    share = record.get("top_output_share")
    if share is not None and share > TOP_OUTPUT_MAX:
        shown = record.get("top_output") or ""
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        reasons.append(f"{share:.0%} of its test outputs are one line (\"{shown}\"; at most "
                       f"{TOP_OUTPUT_MAX:.0%} allowed)")
    verdict, said = source_use_verdict(record.get("source_use"), record.get("source_use_error"))
    if reasons or verdict == DOES_NOT:
        return DOES_NOT, reasons + (said if verdict == DOES_NOT else [])
    if verdict == UNDECIDED:
        return UNDECIDED, said
    return (NOT_CHECKED if verdict == NOT_CHECKED or share is None else TRANSLATES), []


def source_use_verdict(use: float | None, error: float | None) -> tuple[str, list[str]]:
    """The gate on source use alone (the selection's, which decodes no test set): a
    verdict and its reasons, ``NOT_CHECKED`` where it was not measured."""
    if use is None:
        return NOT_CHECKED, []
    if error is not None and abs(use - SOURCE_USE_MIN) < MARGIN_ERRORS * error:
        return UNDECIDED, [f"its source use, {use:.3f} ± {error:.3f} nats per target token (standard error), is "
                           f"within {MARGIN_ERRORS:g} standard errors of the {SOURCE_USE_MIN} needed"]
    if use < SOURCE_USE_MIN:
        return DOES_NOT, [f"its source use is {use:.3f} nats per target token (at least {SOURCE_USE_MIN} needed)"]
    return TRANSLATES, []


def group_verdict(runs: Sequence[Record]) -> str:
    """A configured model at one budget translates when every seed does: one seed that
    does not makes the seeds' mean a mix of two kinds of model; one that is undecided
    leaves the model undecided."""
    verdicts = {run.get("translates") or NOT_CHECKED for run in runs}
    for verdict in (DOES_NOT, UNDECIDED, NOT_CHECKED):
        if verdict in verdicts:
            return verdict
    return TRANSLATES


def failing_seeds(runs: Sequence[Record]) -> str:
    """``seed 2: its source use is ...; seed 3: ...``: why each seed that does not
    translate, or is undecided, is so."""
    return "; ".join(f"seed {run.get('seed')}: " + " and ".join(run.get("gate_reasons") or [])
                     for run in runs if not ranked(run.get("translates")))
