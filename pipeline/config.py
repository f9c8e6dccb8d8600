"""Experiment configuration: one YAML file per experiment, validated on load.

Each stage's section is defined beside its stage (``stages/<stage>/config.py``); this
module holds the experiment that gathers them, the slices each stage is keyed on, and
loading. Every section refuses unknown keys (``pipeline/core/section.py``), so a typo is an
error; ``load_config`` turns every validation problem into one ``ConfigError`` that
names the file, the line, the dotted key, and the valid keys or the closest match
(``pipeline/config_errors.py``). Relative paths in the file are resolved against the
file's own directory, so a config works from any working directory.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from pipeline.config_errors import QUOTED_CHARS, describe_problems, quoted
from pipeline.core.section import Section, resolve_path
from stages.bpe.config import BpeConfig
from stages.clean.config import CleanConfig
from stages.download.config import SOURCE_TYPES, DownloadConfig
from stages.evaluate.config import EvaluateConfig, EvaluateStageConfig
from stages.select.config import CandidateRun, SelectConfig, SelectStageConfig, width_ladder
from stages.shared.models.families import family
from stages.shared.models.spec import ModelSpec
from stages.shared.names import select_stage, train_stage, tune_stage
from stages.report.config import ReportConfig, ReportStageConfig
from stages.tokenize.config import TokenizeConfig
from stages.train.config import TrainConfig, TrainStageConfig
from stages.tune.config import TuneConfig, TuneStageConfig


class ExtraSeeds(Section):
    """Seeds trained at some budgets only, beside the experiment's ``seeds``."""

    seeds: list[int] = Field(min_length=1)  # each one not among the experiment's seeds
    budgets: list[float] = Field(min_length=1)  # each one of the experiment's budgets

    @field_validator("seeds", "budgets")
    @classmethod
    def _distinct(cls, value: list, info: ValidationInfo) -> list:
        if len(set(value)) != len(value):
            raise ValueError(f"{info.field_name} must be distinct; got {value}")
        return value


def _naming_the_key(model: ModelSpec, section: str, check) -> None:
    """Run ``check`` (a validation of ``model``'s merged ``section``); its first problem
    becomes one line naming the model and the key: model 'rnn': tune.budget: ..."""
    try:
        check()
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join([section, *(str(part) for part in problem["loc"])])
        raise ValueError(f"model {model.name!r}: {where}: {problem['msg']}") from None


class ConfigError(Exception):
    """A config file or override that cannot be used; the message says where and why."""


class ExperimentConfig(Section):
    """One experiment: the data stages' sections, and the models trained and compared
    under one shared train and evaluate section."""

    # the experiment: MLflow experiment name (at most 500 characters there) and the report's title
    name: str = Field(min_length=1, max_length=500)
    # Where artifacts are stored: a path (relative to this file, as every path in it is)
    # or an object store URI; --artifact-root and NMT_ARTIFACT_ROOT override it (a path
    # there is relative to the working directory, as any command-line path).
    artifact_root: str = Field("artifacts", validate_default=True)
    # Directories searched for pinned files before any download (relative to this file).
    mirrors: list[str] = []
    download: DownloadConfig  # the language pair and each split's source
    clean: CleanConfig = CleanConfig()  # normalization and the training split's filters
    bpe: BpeConfig = BpeConfig()  # the SentencePiece model(s)
    tokenize: TokenizeConfig = TokenizeConfig()  # the sharded Arrow encoding
    train: TrainConfig | None = None  # how every model is trained; needed once there are models
    evaluate: EvaluateConfig = EvaluateConfig()  # how every model is decoded and scored
    models: list[ModelSpec] = []  # the models trained and compared, one train and evaluate stage each
    # Train every model once per seed (train.seed), each run its own artifact named after
    # the model and seed (transformer_tiny.s2); the report gives each model's mean,
    # standard deviation and every seed's score. []: one run per model, train.seed.
    seeds: list[int] = []
    # Train every model at each of these budgets of counted training FLOPs
    # (train.max_train_flops), each run named after the model and budget (rnn_tiny.3e13);
    # with four or more, the report fits laws of quality against compute to each
    # family's envelope. []: the train section's budget.
    budgets: list[float] = []
    # More seeds at some budgets only (say three seeds at two budgets of a sweep whose
    # other budgets train one): each named seed also trains at each named budget.
    extra_seeds: ExtraSeeds | None = None
    # Branch the budgets from one run: every budget of a model (each size and seed) shares
    # one stable phase of the wsd schedule, trained once as a chain of segments, each up
    # to where the next budget's decay begins; each budget decays from its segment's
    # final checkpoint. The budgets then cost about the largest one plus the decays.
    branch_budgets: bool = False
    # Choose each model's (each size's) peak learning rate with Ray Tune before its runs
    # train (stages/tune/): its train runs then use the chosen train.lr. A model whose own
    # train overrides set lr keeps that one. null: train.lr as configured.
    tune: TuneConfig | None = None
    # Choose each model's size and peak rate at every budget on seeds of their own, then
    # train the choice on ``seeds`` (stages/select/): ``sizes`` are then candidates.
    # null: every size of every model is trained and compared as configured.
    select: SelectConfig | None = None
    report: ReportConfig = ReportConfig()  # which comparisons get a verdict
    # Set by the selection (pipeline/selection.py), not in a config: each model's
    # candidates (size, peak rate) in the round a store has reached.
    candidates: dict[str, list[tuple[str, float]]] = Field(default={}, exclude=True)
    # Set by the selection, not in a config: the rounds of extension used before this one.
    extensions_used: int = Field(default=0, exclude=True)
    # Set by the selection, not in a config: once settled, each model's chosen (size,
    # peak rate) at each budget where a candidate translated.
    chosen: dict[str, dict[float, tuple[str, float]]] | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _models_need_a_train_section(self) -> ExperimentConfig:
        if self.models and self.train is None:
            raise ValueError("'models' are listed but there is no 'train' section with a budget")
        if self.extra_seeds is not None:
            self._check_extra_seeds()
        self._check_size_budgets()
        self._check_tune_overrides()
        if self.select is not None:
            self._check_selection()
        for model in self.models:
            if model.select and self.select is None:
                raise ValueError(f"model {model.name!r}: select overrides the experiment's select section, which "
                                 "this config does not have: add a 'select' section (or drop the model's)")
        if self.branch_budgets:
            self._check_branching()
        for sized in self.tuned_sizes():
            schedule = self.train_stage_config(sized).train.schedule
            if schedule == "noam":
                raise ValueError(f"model {sized.name!r}: tune chooses train.lr, which schedule 'noam' does not use "
                                 "(it scales by lr_scale): use cosine, constant or wsd")
        self._check_primary_comparisons()
        for model in self.stable_segments() + self.trained_models() + self.selection_runs():
            _naming_the_key(model, "train", lambda: self.train_stage_config(model))
        return self

    def _check_primary_comparisons(self) -> None:
        sizes = [sized.name for model in self.models for sized in model.at_sizes()]
        for pair in self.report.primary_comparisons:
            unknown = [name for name in pair if name not in sizes]
            if unknown:
                raise ValueError(f"report.primary_comparisons: {', '.join(map(repr, unknown))} is not a configured "
                                 f"model; the models (and sizes) are {', '.join(sizes)}")

    def _check_selection(self) -> None:
        """What select-then-confirm needs, each error naming its key."""
        if not self.budgets:
            raise ValueError("select chooses each model's size and rate at each budget: list them in 'budgets'")
        if not self.seeds:
            raise ValueError("select chooses on select.seeds and confirms on 'seeds': list the confirming seeds")
        shared = sorted(set(self.seeds) & set(self.select.seeds))
        if shared:
            raise ValueError(f"select.seeds {shared} are in 'seeds' too: a seed that chose takes part in no verdict")
        for key, set_ in (("tune", self.tune), ("extra_seeds", self.extra_seeds)):
            if set_ is not None:
                raise ValueError(f"select chooses every run's size and rate and trains it on 'seeds': drop {key!r}")
        if self.report.primary_comparisons:
            raise ValueError("select chooses one configuration per model and budget, which the report compares: "
                             "drop report.primary_comparisons")
        for model in self.models:
            self._check_model_select(model)
            ladder = width_ladder(list(family(model.family).presets))
            off = [size for size in model.sizes if size not in ladder]
            if len(model.sizes) < 2 or off:
                raise ValueError(f"model {model.name!r}: select needs two or more sizes (three or more bracket the "
                                 f"optimum) from the width presets {ladder[0]} ... {ladder[-1]}"
                                 + (f"; {off} are not" if off else f"; got {model.sizes}"))
            for key, held in (("train.lr", "lr" in model.train), ("size_budgets", model.size_budgets)):
                if held:
                    raise ValueError(f"model {model.name!r}: select chooses each size's rate and budgets: "
                                     f"drop {key}")

    def _check_model_select(self, model: ModelSpec) -> None:
        other = sorted(set(model.select) - {"learning_rates"})
        if other:
            raise ValueError(f"model {model.name!r}: select.{other[0]} is the experiment's: a model's select sets "
                             "only its learning_rates")
        _naming_the_key(model, "select", lambda: self.select_rates(model))

    def select_rates(self, model: ModelSpec) -> list[float]:
        """The peak rates ``model``'s sizes try first: its own select.learning_rates, or
        the experiment's."""
        if not model.select:
            return self.select.learning_rates
        return SelectConfig.model_validate({**self.select.model_dump(), **model.select}).learning_rates

    def first_candidates(self) -> dict[str, list[tuple[str, float]]]:
        """Each model's first round of candidates: every size at every rate it tries
        first (``select_rates``)."""
        return {model.name: [(size, lr) for size in model.sizes for lr in self.select_rates(model)]
                for model in self.models}

    def _candidate(self, model: ModelSpec, size: str, lr: float, budgets: list[float] | None = None) -> ModelSpec:
        """One size of ``model`` at one peak rate (named transformer.w32.lr4e-3), at
        ``budgets`` (None: every one)."""
        return ModelSpec(name=f"{model.name}.{size}.lr{budget_label(lr)}", family=model.family, preset=size,
                         settings=model.settings, train={**model.train, "lr": lr}, budgets=budgets)

    def _view(self, models: list[ModelSpec], seeds: list[int]) -> ExperimentConfig:
        """This experiment with other models and seeds and no select section: the
        selection's candidate runs, or the runs that confirm its choice."""
        return self.model_copy(update={"models": models, "seeds": seeds, "select": None, "candidates": {},
                                       "chosen": None})

    def selecting(self) -> ExperimentConfig | None:
        """This round's candidates as an experiment of their own (each a model, on the
        selection seeds); None without a select section."""
        if self.select is None:
            return None
        candidates = self.candidates or self.first_candidates()
        return self._view([self._candidate(model, size, lr) for model in self.models
                           for size, lr in candidates[model.name]], self.select.seeds)

    def _confirming(self) -> ExperimentConfig | None:
        """The runs that confirm the settled choice: each model's chosen (size, rate),
        at the budgets where it was chosen, on ``seeds``."""
        if self.select is None or self.chosen is None:
            return None
        models = []
        for model in self.models:
            where_chosen = {}  # (size, rate) -> the budgets it was chosen at
            for budget, pair in sorted(self.chosen.get(model.name, {}).items()):
                where_chosen.setdefault(tuple(pair), []).append(budget)
            models += [self._candidate(model, size, lr, at) for (size, lr), at in where_chosen.items()]
        return self._view(models, self.seeds)

    def selection_runs(self) -> list[ModelSpec]:
        """With a select section: the candidates' runs on the selection seeds (their
        stable-phase segments first, where budgets branch). [] otherwise."""
        view = self.selecting()
        return view.stable_segments() + view.trained_models() if view else []

    def select_stage_configs(self) -> list[tuple[str, SelectStageConfig]]:
        """Each select stage (``select/<model>``) and its slice: the model's candidate
        runs at every budget and selection seed."""
        view = self.selecting()
        if view is None:
            return []
        found, candidates = [], self.candidates or self.first_candidates()
        for model in self.models:
            names = {self._candidate(model, size, lr).name for size, lr in candidates[model.name]}
            runs = [CandidateRun(size=run.preset, lr=run.train["lr"], budget=run.train["max_train_flops"],
                                 seed=run.train["seed"], run=run.name)
                    for run in view.trained_models() if run.run_of in names]
            found.append((select_stage(model.name), SelectStageConfig(
                model=model.name, ladder=width_ladder(list(family(model.family).presets)), runs=runs,
                budgets=self.budgets, extensions_left=self.select.max_extensions - self.extensions_used)))
        return found

    def _check_tune_overrides(self) -> None:
        for model in self.models:
            if not model.tune:
                continue
            if self.tune is None:
                raise ValueError(f"model {model.name!r}: tune overrides the experiment's tune section, which this "
                                 "config does not have: add a 'tune' section (or drop the model's)")
            _naming_the_key(model, "tune", lambda: self.tune_of(model))

    def _check_size_budgets(self) -> None:
        for model in self.models:
            for size, budgets in model.size_budgets.items():
                if not budgets:
                    raise ValueError(f"model {model.name!r}: size_budgets.{size}: list at least one budget")
                missing = [budget for budget in budgets if budget not in self.budgets]
                if missing:
                    raise ValueError(f"model {model.name!r}: size_budgets.{size}: "
                                     f"{', '.join(map(budget_label, missing))} not among 'budgets' "
                                     f"({', '.join(map(budget_label, self.budgets))})")

    def _check_extra_seeds(self) -> None:
        extra = self.extra_seeds
        if not self.seeds:
            raise ValueError("extra_seeds adds seeds beside 'seeds': list the seeds every budget trains in 'seeds'")
        missing = [budget for budget in extra.budgets if budget not in self.budgets]
        if missing:
            raise ValueError(f"extra_seeds.budgets {', '.join(map(budget_label, missing))} are not among 'budgets' "
                             f"({', '.join(map(budget_label, self.budgets))})")
        repeated = sorted(set(extra.seeds) & set(self.seeds))
        if repeated:
            raise ValueError(f"extra_seeds.seeds {repeated} are in 'seeds' already: every budget trains them")

    def _check_branching(self) -> None:
        """What budgets branched from one stable phase need, each error naming its key."""
        if len(self.budgets) < 2:
            raise ValueError("branch_budgets shares one stable phase among budgets: list at least two in 'budgets'")
        for model in self.models:
            if self.tune is not None and self.tune_of(model).budget_fraction is not None:
                where = f"model {model.name!r}: " if "budget_fraction" in model.tune else ""
                raise ValueError(f"{where}tune.budget_fraction chooses a rate per budget, but branch_budgets trains "
                                 "one stable phase (at one rate) for all budgets: use one or the other")
            where = f"model {model.name!r}: " if model.train else ""
            merged = {**self.train.model_dump(exclude_unset=True), **model.train}
            schedule = merged.get("schedule", TrainConfig.model_fields["schedule"].default)
            if schedule != "wsd":
                raise ValueError(f"{where}branch_budgets needs train.schedule: wsd (its stable phase is the same "
                                 f"for every budget); got {schedule!r}")
            if merged.get("warmup_fraction") is not None:
                raise ValueError(f"{where}branch_budgets needs train.warmup_steps, not train.warmup_fraction: the "
                                 "budgets share one warmup")
            if model.settings.get("ae_fraction") is not None:
                raise ValueError(f"model {model.name!r}: branch_budgets needs settings.ae_steps, not "
                                 "settings.ae_fraction: the budgets share one reconstruction-loss schedule")

    def train_stage_config(self, model: ModelSpec) -> TrainStageConfig:
        # What the train section set, then the model's overrides: defaults stay defaults, so
        # a check of which keys were set (an absolute value beside a fraction) sees the user's.
        merged = TrainConfig.model_validate({**self.train.model_dump(exclude_unset=True), **model.train})
        return TrainStageConfig(model=model, train=merged, start_from=model.start_from,
                                until_decay=model.until_decay, lr_from=model.lr_from)

    def tuned_sizes(self) -> list[ModelSpec]:
        """With a tune section: every size of every model whose learning rate it chooses.
        [] otherwise."""
        if self.tune is None:
            return []
        return [sized for model in self.models for sized in model.at_sizes() if "lr" not in sized.train]

    def tune_of(self, model: ModelSpec) -> TuneConfig:
        """The tune section ``model``'s rates are chosen with: the experiment's, then the
        model's own ``tune`` overrides (as ``train_stage_config`` merges ``train``)."""
        if not model.tune:
            return self.tune
        return TuneConfig.model_validate({**self.tune.model_dump(exclude_unset=True), **model.tune})

    def tune_budget(self, sized: ModelSpec, budget: float | None) -> float:
        """The budget a run of ``sized`` at ``budget`` has its rate chosen at (its tune
        stage's trials'): ``tune.budget``, or with ``tune.budget_fraction`` that fraction
        of the run's, at least ``tune.budget`` and at most the run's own."""
        tune = self.tune_of(sized)
        if tune.budget_fraction is None or budget is None:
            return tune.budget
        return min(budget, max(tune.budget, tune.budget_fraction * budget))

    def tunings(self) -> list[tuple[str, ModelSpec, float]]:
        """Each tune stage: its name, the size whose rate it chooses and its trials'
        budget. One per tuned size (``tune/<model>.<size>``), or with
        ``tune.budget_fraction`` one per size and trial budget
        (``tune/<model>.<size>.<trial budget>``)."""
        stages: dict[str, tuple[ModelSpec, float]] = {}
        for sized in self.tuned_sizes():
            for budget in self.budgets_of(sized) or [None]:
                stages.setdefault(self._rate_stage(sized, budget), (sized, self.tune_budget(sized, budget)))
        return [(name, sized, budget) for name, (sized, budget) in stages.items()]

    def _rate_stage(self, sized: ModelSpec, budget: float | None) -> str | None:
        """The tune stage that chooses the rate of ``sized``'s runs at ``budget``; None
        when its rate is not tuned."""
        if self.tune is None or "lr" in sized.train:
            return None
        if self.tune_of(sized).budget_fraction is None:
            return tune_stage(sized.name)
        return tune_stage(f"{sized.name}.{budget_label(self.tune_budget(sized, budget))}")

    def tune_stage_config(self, sized: ModelSpec, budget: float) -> TuneStageConfig:
        return TuneStageConfig(model=sized, train=self.train_stage_config(sized).train,
                               tune=self.tune_of(sized).model_copy(update={"budget": budget}))

    def _sizes(self) -> list[ModelSpec]:
        return [sized for model in self.models for sized in model.at_sizes()]

    def stable_segments(self) -> list[ModelSpec]:
        """With ``branch_budgets``: each run's stable phase, as a chain of segments per
        model, size and seed, one per budget (``<run>.stable``, e.g.
        transformer.w128.2e12.s1.stable), each continuing the one before and stopping
        where its budget's decay begins. [] otherwise."""
        if self.select is not None:  # the confirming runs' segments; the candidates' are selection_runs
            confirming = self._confirming()
            return confirming.stable_segments() if confirming else []
        if not self.branch_budgets:
            return []
        segments = []
        for sized in self._sizes():
            for seed in self.seeds + (self.extra_seeds.seeds if self.extra_seeds else []) or [None]:
                before = None
                for budget in (b for b in sorted(self.budgets_of(sized)) if seed in self.seeds_at(b)):
                    run = self._run(sized, budget, seed)
                    segment = run.model_copy(update={"name": f"{run.name}.stable", "start_from": before,
                                                     "until_decay": True})
                    segments.append(segment)
                    before = train_stage(segment.name)
        return segments

    def budgets_of(self, sized: ModelSpec) -> list[float]:
        """The budgets one size (``<model>.<size>``) trains at: its model's
        ``size_budgets`` for it, else every one."""
        if sized.budgets is not None:
            return sized.budgets
        windows = {f"{model.name}.{size}": budgets for model in self.models
                   for size, budgets in model.size_budgets.items()}
        return windows.get(sized.name, self.budgets)

    def seeds_at(self, budget: float | None) -> list[int | None]:
        """The seeds trained at ``budget``: ``seeds``, and ``extra_seeds`` where it names
        the budget; [None] (the train section's seed) without seeds."""
        extra = self.extra_seeds.seeds if self.extra_seeds and budget in self.extra_seeds.budgets else []
        return self.seeds + extra or [None]

    def evaluate_stage_config(self, model: ModelSpec) -> EvaluateStageConfig:
        return EvaluateStageConfig(model=model.name, evaluate=self.evaluate)

    def trained_models(self) -> list[ModelSpec]:
        """The runs the graph trains: each of ``models`` once per size, budget and seed,
        the size as its preset, budget and seed set in its train overrides, all three named
        in its name (transformer.w128.3e12.s1). Without
        ``seeds`` and ``budgets``, ``models`` itself: adding either later leaves the
        runs already trained under other names untouched. With a select section, the runs
        that confirm its settled choice ([] until it is settled)."""
        if self.select is not None:
            confirming = self._confirming()
            return confirming.trained_models() if confirming else []
        runs = []
        for sized in self._sizes():
            for budget in self.budgets_of(sized) or [None]:
                for seed in self.seeds_at(budget):
                    run = self._run(sized, budget, seed)
                    if self.branch_budgets:  # decays from its stable-phase segment
                        run = run.model_copy(update={"start_from": train_stage(f"{run.name}.stable")})
                    runs.append(run)
        return runs

    def _run(self, sized: ModelSpec, budget: float | None, seed: int | None) -> ModelSpec:
        """One size of a model at one budget and seed, named after them, told the tune
        stage of its rate if tuned."""
        name, train = sized.name, dict(sized.train)
        if budget is not None:
            name, train["max_train_flops"] = f"{name}.{budget_label(budget)}", budget
        if seed is not None:
            name, train["seed"] = f"{name}.s{seed}", seed
        run = sized if name == sized.name else sized.model_copy(
            update={"name": name, "train": train, "run_of": sized.name})
        rate_stage = self._rate_stage(sized, budget)
        return run.model_copy(update={"lr_from": rate_stage}) if rate_stage else run

    def report_stage_config(self) -> ReportStageConfig:
        return ReportStageConfig(experiment=self.name, models=[run.name for run in self.trained_models()],
                                 run_of={run.name: run.run_of for run in self.trained_models() if run.run_of},
                                 tuned=[name for name, _, _ in self.tunings()],
                                 selected=[name for name, _ in self.select_stage_configs()],
                                 primary_comparisons=self.report.primary_comparisons)

    @field_validator("models")
    @classmethod
    def _unique_model_names(cls, value: list[ModelSpec]) -> list[ModelSpec]:
        names = [model.name for model in value]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"model names must be unique; repeated: {', '.join(duplicates)}")
        return value

    @field_validator("seeds", "budgets")
    @classmethod
    def _distinct(cls, value: list, info: ValidationInfo) -> list:
        if len(set(value)) != len(value):
            raise ValueError(f"{info.field_name} must be distinct; got {value}")
        if info.field_name == "budgets" and any(budget <= 0 for budget in value):
            raise ValueError(f"budgets are counted training FLOPs, each above 0; got {value}")
        return value

    @field_validator("mirrors")
    @classmethod
    def _resolve_mirrors(cls, value: list[str], info: ValidationInfo) -> list[str]:
        return [resolve_path(entry, info) for entry in value]

    @field_validator("artifact_root")
    @classmethod
    def _resolve_root(cls, value: str, info: ValidationInfo) -> str:
        return value if "://" in value else resolve_path(value, info)


def budget_label(flops: float) -> str:
    """A FLOPs budget (or a rate) as run names show it: 3.5e13 -> "3.5e13", 1e14 ->
    "1e14", 0.004 -> "4e-3"."""
    mantissa, exponent = f"{flops:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


# --------------------------------------------------------------------------- loading


MAX_CONFIG_BYTES = 1 << 20


def load_config(path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
    """Read, override and validate an experiment file; raise ConfigError on any problem."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:  # refused unparsed: a config names its data, it does not hold it
        raise ConfigError(f"{path}: {size:,} bytes, over the {MAX_CONFIG_BYTES:,} a config may have (a config "
                          "names its corpus and settings; it does not hold data)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        line = path.read_bytes()[:error.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 (byte {error.object[error.start]:#04x}); "
                          "save the config as UTF-8") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the config: {error.strerror}") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as error:  # one line: where, and what
        where = f"line {error.problem_mark.line + 1}, column {error.problem_mark.column + 1}: " \
            if error.problem_mark else ""
        raise ConfigError(f"{path}: {where}not valid YAML: {error.problem or error.context}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    for override in overrides:
        _apply_override(raw, override)
    try:
        return ExperimentConfig.model_validate(raw, context={"base_dir": path.parent.resolve()})
    except ValidationError as error:
        problems = describe_problems(error, text, overrides, ExperimentConfig, SOURCE_TYPES)
        raise ConfigError(f"{path}: invalid config\n{problems}") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error: PyYAML
    keeps the last value silently, so a setting written twice would be lost."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _apply_override(raw: dict, override: str) -> None:
    """Apply ``a.b.c=value``; the value is parsed as YAML so numbers and booleans work."""
    if "=" not in override:
        raise ConfigError(f"--set {quoted(override)}: expected KEY=VALUE, e.g. tokenize.shards=8")
    dotted, value = override.split("=", 1)
    shown = dotted.strip() if len(dotted) <= QUOTED_CHARS else quoted(dotted.strip())  # a key in an error
    keys = dotted.strip().split(".")
    node = raw
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {quoted(override)}: {quoted(key)} is not a section")
        node = child
    try:
        node[keys[-1]] = yaml.safe_load(value)
    except yaml.YAMLError as error:
        raise ConfigError(f"--set {shown}: the value is not YAML ({error.problem or error})") from None
    except RecursionError:  # the parser recurses once per level of nesting
        raise ConfigError(f"--set {shown}: the value is nested too deeply to read") from None
