"""What a stage is, written once.

A stage is a plain function with one signature (``StageRun``): it reads its upstream
artifacts (``inputs``: stage name -> local directory), takes its slice of the config,
writes its own artifact into ``output`` and returns the metrics it wants recorded.
It is called directly in tests; the runner (``pipeline/runner.py``) calls it in a Ray
task and commits ``output`` to the artifact store only once it returns.

Every stage package under ``stages/`` has the same layout:

    stages/<stage>/__init__.py   run() (a StageRun), VERSION, the artifact's readers
                                 (read_index(), pairs_file(), ...), preflight() if any
    stages/<stage>/config.py     the stage's config section (a pipeline.section.Section)
    stages/<stage>/*.py          the stage's own helpers

``Stage`` below says how the graph (``pipeline/graph.py``) uses one: its name, its
upstream stages, which config slice it is keyed on, and the version of its output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, TypeVar

from pipeline.context import StageContext
from pipeline.section import Section

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
    # CPUs the stage's own Ray task holds. Training holds none: its Ray Train workers
    # ask for their own, and a waiting driver task must not starve them.
    task_cpus: float = 1
    # Files of the artifact (glob patterns) also logged to the stage's MLflow run.
    mlflow_files: tuple[str, ...] = ()
    # What this machine cannot run, refused before a local run starts anything.
    preflight: Preflight | None = None

    @property
    def group(self) -> str:
        """``train`` for ``train/<model>``; a stage's own name otherwise."""
        return self.name.split("/", 1)[0]

