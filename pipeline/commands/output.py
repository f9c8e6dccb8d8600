"""What the commands share: plain-text errors with an exit status, loading a config
and its store, and the tables they print."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from pipeline.core.artifacts import ArtifactStore
from pipeline.config import ConfigError, ExperimentConfig, load_config
from pipeline.core.object_store import redact

if TYPE_CHECKING:
    from stages.report.artifact import ReportFile


def table_console() -> Console:
    """Tables go to stdout; piped output gets a wide console instead of rich's 80 columns."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def fail(message: str, code: int) -> None:
    # Plain text: messages quote file contents and tool output that rich would parse as markup.
    typer.secho(f"error: {redact(message)}", fg="red", err=True)
    raise typer.Exit(code)


def load_experiment(config: Path, overrides: list[str]) -> ExperimentConfig:
    try:
        experiment = load_config(config, overrides)
    except ConfigError as error:
        fail(str(error), 2)
    _say_if_root_moved(config, experiment)
    return experiment


def _say_if_root_moved(config: Path, experiment: ExperimentConfig) -> None:
    """A relative ``artifact_root`` is relative to the config file; it was relative to
    the working directory. Where the new place has nothing yet and the old one holds
    artifacts, say so: a run would otherwise train again into the new place."""
    root = Path(experiment.artifact_root)
    if "://" in experiment.artifact_root or root.exists():
        return
    old = Path.cwd() / os.path.relpath(root, config.parent.resolve())
    if old.resolve() != root and old.is_dir() and any(old.iterdir()):
        typer.secho(f"note: artifact_root in {config} is relative to that file, so it is {root}; {old.resolve()} "
                    "(the same path from the working directory, where it used to be read) holds artifacts: move "
                    "them there, or set an absolute artifact_root or --artifact-root", fg="yellow", err=True)


def open_store(config: ExperimentConfig, artifact_root: str | None, writable: bool = False) -> ArtifactStore:
    """The config's artifact store, checked: it can be listed (and written, if
    ``writable``), or the command exits with one line saying why."""
    try:
        store = ArtifactStore(artifact_root or config.artifact_root)
        store.check_usable(writable)
    except (ValueError, OSError) as error:
        fail(f"artifact root: {error}", 2)
    return store


def human_bytes(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def print_report(report: ReportFile) -> None:
    """The report's console summary (stages/report/artifact.py ``summary``): a table that
    fits 100 columns and the lines under it."""
    from stages.report.artifact import summary

    from rich.text import Text

    frame, footnotes = summary(report)
    table = Table(title=report.title)
    for column in frame.columns:
        table.add_column(column, overflow="fold")  # a long model name wraps whole, never cut with "…"
    for row in frame.itertuples(index=False):
        table.add_row(*(Text(str(cell)) for cell in row))  # "[5.29, 12.48]" is no markup
    out = table_console()
    out.print(table)
    for line in footnotes:
        out.print(line, markup=False, highlight=False)
