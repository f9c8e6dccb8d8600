"""The comparison's records: what ``comparison.compare`` finds, report.json's
``comparison`` (written in these fields' order), and what the tables, plots and the
console summary read.

One record per thing the report compares: a configured model at a budget with its
seeds (``GroupSummary``), its interval per metric (``SystemInterval``), a test between
two of them (``PairedTest``), a model withheld because it does not translate
(``Withheld``), a family's laws over its budgets (``FamilyLaws``) and IsoFLOP profiles
(``IsoflopFamily``), a tuned learning rate (``TunedModel``). The modules that compute
them (``seeds``, ``significance``, ``compute_laws``, ``isoflop``, ``ngram_baselines``)
return them and read them by attribute. ``FieldAccess`` still lets a record be read by
field name (a name that is not a field is a ``KeyError``, not a ``None``), for the tests
and benchmarks that do.

A fitted law's details (``FamilyLaws.valid_loss``) and a budget's IsoFLOP profile
(``IsoflopFamily.profiles``) stay dicts: each is written and read back by one module
(``compute_laws``, ``isoflop``) and its tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.records import FieldAccess, load, nested, optional, to_json
from stages.select.artifact import SelectionChoice
from stages.tune.artifact import TuneChoice


@dataclass(kw_only=True)
class Spread(FieldAccess):
    """A scored field over a group's seeds: mean, sample standard deviation (None for one
    seed) and each seed's value."""

    mean: float | None
    std: float | None
    each: list[float]


@dataclass(kw_only=True)
class ShortOfBudget(FieldAccess):
    """A run that stopped before its FLOPs budget (a wall time, say)."""

    seed: int | None
    train_flops: float
    stop_reason: str | None


@dataclass(kw_only=True)
class GroupSummary(FieldAccess):
    """A configured model at one budget, its seeds together (``seeds.ModelAtBudget``)."""

    label: str  # the model's name, and its budget where the report spans several
    model: str
    family: str
    budget: float | None
    preset: str | None
    parameters: int | None
    non_embedding_parameters: int | None
    seeds: list[int | None]
    train_flops: float  # the seeds' mean
    train_tokens: float | None
    short_of_budget: list[ShortOfBudget]
    bleu: Spread
    chrf: Spread
    valid_loss: Spread  # of the weights each seed ended with
    diverged_seeds: list[int | None]
    translates: str  # gate.py's verdict over every seed
    not_translating: str | None  # gate.failing_seeds: why each failing seed fails
    source_use: Spread


@dataclass(kw_only=True)
class SacrebleuInterval(FieldAccess):
    """sacreBLEU's ``--confidence`` of the seeds' mean: the test set's variation alone."""

    mean: float
    ci: float


@dataclass(kw_only=True)
class SystemInterval(FieldAccess):
    """A group's score on one metric with its 95% interval (``welch.system_interval``)."""

    score: float
    seed_variance_measured: bool
    standard_error: float
    df: float | None  # None: no term varies (JSON has no infinity)
    low: float
    high: float
    seeds: int
    sacrebleu: SacrebleuInterval


@dataclass(kw_only=True)
class Agreement(FieldAccess):
    """The estimated share (%) of system pairs with a delta this large whose order humans
    confirm; ``bound`` "at most" or "at least" outside the published table."""

    percent: float
    bound: str | None


@dataclass(kw_only=True)
class PairedTest(FieldAccess):
    """One pair (a, b) on one metric: delta = b - a with its interval and p, the test
    set's own tests beside it, and after ``significance.adjust`` the verdict's Holm p."""

    a: str
    b: str
    metric: str
    role: str  # significance.PRIMARY, SECONDARY or EXPLORATORY
    seeds: list[int]
    seed_variance_measured: bool
    # The seeds' term of the delta's variance over the test set's (None: not measured);
    # under significance.SEEDS_AGREED the seeds agreed. Absent in reports before VERSION 29.
    seed_share: float | None = None
    repeated_seeds: dict[str, dict]
    a_score: float
    b_score: float
    delta: float
    delta_low: float
    delta_high: float
    standard_error: float
    df: float | None
    p: float
    detectable: float  # the difference the test detects with 80% power
    p_bootstrap: float
    p_randomization: float | None
    p_bootstrap_sacrebleu: float
    p_randomization_sacrebleu: float | None
    agreement: Agreement
    agreement_low: Agreement
    agreement_high: Agreement
    # Set by significance.adjust over the report's tests: how many it counted, and for the
    # primary tests with significance.VERDICT_SEEDS seeds a side, Holm's p and the verdict.
    family_size: int = 0
    p_holm: float | None = None
    significant: bool | None = None


@dataclass(kw_only=True)
class Withheld(FieldAccess):
    """A group left out of every test, verdict, profile and law: it does not translate."""

    label: str
    budget: float | None
    why: str | None  # gate.failing_seeds
    seeds_translating: list[int | None]
    translates: str = "no"  # gate.DOES_NOT or gate.UNDECIDED; absent before report VERSION 29


@dataclass(kw_only=True)
class EnvelopePoint(FieldAccess):
    """A family's best size at one budget, by validation loss."""

    budget: float
    model: str
    preset: str | None
    parameters: int | None
    train_flops: float
    valid_loss: float
    bleu: float | None
    edge: str | None  # "smallest" or "largest" size tried there


@dataclass(kw_only=True)
class FamilyLaws(FieldAccess):
    """A family's envelope over its budgets and, per metric with enough budgets, its
    saturating and power laws (``compute_laws._laws``: fits, intervals, leave-one-out)."""

    family: str
    envelope: list[EnvelopePoint]
    measured_from: float
    measured_to: float
    valid_loss: dict | None = optional()
    bleu: dict | None = optional()


@dataclass(kw_only=True)
class LawCrossover(FieldAccess):
    """Where two families' saturating loss laws cross, and how often their draws do."""

    families: list[str]
    flops: float | str  # compute_laws.BEYOND when not inside both measured ranges
    interval: list[float] | None
    share_of_draws: float
    draws: int


@dataclass(kw_only=True)
class IsoflopFamily(FieldAccess):
    """A family's IsoFLOP profiles (one dict per budget) and the exponents of its
    compute-optimal size and tokens (``isoflop._exponent``)."""

    family: str
    count: str  # which parameters a size counts
    profiles: list[dict]
    parameters: dict
    total_parameters: dict
    flops_per_token: dict
    tokens: dict


@dataclass(kw_only=True)
class TunedModel(FieldAccess):
    """A tune stage's choice (its ``choice.json``) with the model and family it tuned."""

    model: str
    choice: TuneChoice = nested("", TuneChoice, required=True)
    family: str


@dataclass(kw_only=True)
class Baselines(FieldAccess):
    """The source-blind n-gram losses (``ngram_baselines.baselines``)."""

    nats_per_token: dict[str, float]  # per order
    train_sentences: int
    valid_sentences: int
    vocab_size: int
    smoothing: str


@dataclass(kw_only=True)
class Comparison(FieldAccess):
    """Everything the report says beyond one row per run (``comparison.compare``)."""

    groups: list[GroupSummary]
    intervals: dict[str, dict[str, SystemInterval]]  # group label -> metric -> interval
    tests: list[PairedTest]
    primary: list[str]  # how the primary comparisons were chosen
    withheld: list[Withheld]
    unchecked: list[str]  # groups the translation gate could not judge
    repeated_seeds: dict[str, dict]  # label -> {seed: the seed whose outputs it repeats, line for line}
    alpha: float
    agreement: dict  # metric -> the published agreement table
    laws: list[FamilyLaws]
    law_crossovers: list[LawCrossover]
    isoflop: list[IsoflopFamily]
    baselines: Baselines | None = optional()
    tuning: list[TunedModel] | None = optional()
    # Each configured model's choice at each budget, made on the selection seeds (select/).
    selection: list[SelectionChoice] | None = optional()
    unpaired: list[str] | None = optional()  # pairs at a budget not tested, and why (other test sets)

    def to_json(self) -> dict:
        return to_json(self)


def load_comparison(data: dict, source: str) -> Comparison:
    """report.json's ``comparison`` as a ``Comparison``; ``RecordError`` naming ``source``
    and the path to a missing or unknown field."""
    return load(Comparison, data, source)
