"""What the runner hands a stage besides its inputs and config slice.

A stage calls ``ctx.parallel_map`` for work that should fan out (one Ray task per
item on a cluster, a plain loop when a stage is called directly, as tests do) and
``ctx.progress`` for a progress bar (shown on the driver when running under Ray).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from pipeline.artifacts import default_cache_dir


@dataclass
class StageContext:
    # (fn, items, gpus=0) -> [fn(item) ...]; ``gpus``: what each item's task needs.
    parallel_map: Callable[..., list] = lambda fn, items, gpus=0: [fn(item) for item in items]
    progress: Callable[..., Any] = tqdm
    # Directories searched for pinned files before any download (config `mirrors`, NMT_MIRROR).
    mirrors: list[str] = field(default_factory=list)
    # Where verified downloads are kept, by sha256, across runs and configs.
    download_cache: Path = field(default_factory=lambda: default_cache_dir() / "downloads")
    # Upstream name -> picklable callable that returns a local copy of that artifact on
    # whichever node calls it (training workers may run on other nodes than the stage).
    input_fetchers: dict[str, Callable[[], Path]] = field(default_factory=dict)
    # Takes rows with a ``step`` (a training curve) and records them while the stage
    # runs, from any process; None when nothing is tracking (stages called directly).
    metrics_sink: Callable[[list[dict]], None] | None = None
    # A resumable stage's staging place on an object store, as (filesystem, path): state
    # kept there (training checkpoints) survives the node. None when the store is local,
    # where the stage's own output directory is already on the store.
    durable_staging: tuple[Any, str] | None = None

    def fetcher(self, name: str, local: Path) -> Callable[[], Path]:
        """What a task on another process or node calls to get input ``name``; when the
        stage runs without the runner (tests), the path it was given."""
        return self.input_fetchers.get(name) or LocalPath(local)


class LocalPath:
    """A picklable fetcher for an input path every process can already read."""

    def __init__(self, path: Path):
        self.path = path

    def __call__(self) -> Path:
        return self.path


def ray_parallel_map(fn: Callable, items: list, gpus: float = 0) -> list:
    """One Ray task per item (one CPU, and ``gpus`` GPUs); the caller's CPU is released
    while it waits in ray.get."""
    import ray

    task = ray.remote(num_cpus=1, num_gpus=gpus)(fn)
    return ray.get([task.remote(item) for item in items])


def ray_progress(*args, **kwargs):
    """A tqdm-compatible bar that Ray draws on the driver's terminal."""
    from ray.experimental.tqdm_ray import tqdm as ray_tqdm

    return ray_tqdm(*args, **kwargs)
