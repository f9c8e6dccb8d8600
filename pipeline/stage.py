"""What a stage is, written once.

A stage is a plain function with one signature (``StageRun``): it reads its upstream
artifacts (``inputs``: stage name -> local directory), takes its slice of the config,
writes its own artifact into ``output`` and returns the metrics it wants recorded.
It is called directly in tests; the runner (``pipeline/runner.py``) calls it in a Ray
task and commits ``output`` to the artifact store only once it returns.

Every stage package under ``stages/`` has the same layout, and describes itself:

    stages/<stage>/__init__.py   run() (a StageRun) and VERSION; the artifact's readers
                                 (read_index(), pairs_file(), ...); and, where the
                                 defaults below do not fit, READS, RESUMABLE, TASK_CPUS
                                 (or task_cpus(config)), MLFLOW_FILES, RESOURCES,
                                 preflight() and fingerprint()
    stages/<stage>/config.py     the stage's config section (a pipeline.core.section.Section)
    stages/<stage>/*.py          the stage's own helpers

``Stage`` below is one stage of a graph: what its package says (``Stage.of``), plus
what only the graph (``pipeline/graph.py``) knows: its name, its upstream stages and
which config slice it is keyed on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Protocol, TypeVar

from pipeline.core.context import StageContext
from pipeline.core.section import Section

SectionT = TypeVar("SectionT", bound=Section, contravariant=True)


class StageRun(Protocol[SectionT]):
    """The one stage signature: upstream artifacts in, one artifact out, metrics back."""

    def __call__(self, inputs: dict[str, Path], config: SectionT, output: Path, ctx: StageContext) -> dict[str, Any]:
        ...


class Preflight(Protocol[SectionT]):
    """Raise HardwareError if this machine (with ``cpus`` CPUs) cannot run the stage."""

    def __call__(self, config: SectionT, cpus: int) -> None:
        ...


@dataclass(frozen=True)
class Stage:
    name: str
    run: StageRun
    # The stage's slice of the experiment config; its artifact key is computed from it.
    config_of: Callable[[Any], Section]
    # Bump when the same inputs would now give a different artifact.
    version: int
    upstream: tuple[str, ...] = ()
    # Upstream stage -> glob patterns of the files of its artifact this stage reads; an
    # upstream not named is read whole. From a remote store only these are downloaded.
    reads: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # A resumable stage gets back the staging directory a crashed attempt left behind.
    resumable: bool = False
    # For inputs outside the artifact store: section -> data that changes when they do.
    fingerprint: Callable[[Any], dict] | None = None
    # CPUs the stage's own Ray task holds, or section -> those CPUs (``task_cpus(config)``
    # in the package): a train stage's task holds none where its Ray Train workers ask
    # for their own, and its worker's where it trains in its own process.
    task_cpus: float | Callable[[Any], float] = 1
    # Files of the artifact (glob patterns) also logged to the stage's MLflow run.
    mlflow_files: tuple[str, ...] = ()
    # What this machine cannot run, refused before a local run starts anything.
    preflight: Preflight | None = None
    # The type of ``ctx.resources`` the stage uses (``pipeline.core.context``), if any.
    resources: type | None = None
    # (section, the cluster's resources) -> the Ray resources the stage's workers hold
    # while it runs ({"CPU": 2}), for a stage whose own task holds none: the runner starts
    # such a stage only once the cluster has them free (pipeline/admission.py). None:
    # Ray's task_cpus decide.
    worker_resources: Callable[[Any, dict[str, float]], dict[str, float]] | None = None

    def cpus_of_task(self, section: Section) -> float:
        """The CPUs the stage's own Ray task holds, for its config ``section``."""
        return self.task_cpus(section) if callable(self.task_cpus) else self.task_cpus

    @property
    def group(self) -> str:
        """``train`` for ``train/<model>``; a stage's own name otherwise."""
        return group_of(self.name)


    @classmethod
    def of(cls, package: ModuleType, name: str, config_of: Callable[[Any], Section],
           upstream: tuple[str, ...] = ()) -> Stage:
        """The stage that ``package`` (``stages.train``, ...) describes, under ``name``.
        ``package.READS`` maps an upstream stage's group (``train`` for ``train/<model>``)
        to the files it reads of that artifact."""
        reads = getattr(package, "READS", {})
        return cls(name=name, run=package.run, config_of=config_of, version=package.VERSION, upstream=upstream,
                   reads={stage: reads[group_of(stage)] for stage in upstream if group_of(stage) in reads},
                   resumable=getattr(package, "RESUMABLE", False), fingerprint=getattr(package, "fingerprint", None),
                   task_cpus=getattr(package, "task_cpus", getattr(package, "TASK_CPUS", 1)),
                   mlflow_files=getattr(package, "MLFLOW_FILES", ()),
                   preflight=getattr(package, "preflight", None), resources=getattr(package, "RESOURCES", None),
                   worker_resources=getattr(package, "worker_resources", None))


def group_of(stage: str) -> str:
    """``train`` for ``train/<model>``; a stage's own name otherwise."""
    return stage.split("/", 1)[0]
