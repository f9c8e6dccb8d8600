"""``nmt status`` and ``nmt verify``: the plan's stages with their artifacts' states.
Quick, without Ray, MLflow or torch (tests/unit/pipeline/test_startup.py)."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from pipeline.commands.output import fail, human_bytes, load_experiment, open_store, table_console
from pipeline.core.artifacts import ArtifactState
from pipeline.core.object_store import redact
from pipeline.graph import plan
from pipeline.selection import current_round, selection_line
from stages.download import input_problems


def show_status(config: Path, overrides: list[str], artifact_root: str | None, verify: bool = False) -> None:
    """The plan's stages with their artifact state. ``verify`` (``nmt verify``) re-hashes
    every file, and exits 1 if any artifact is invalid."""
    experiment = load_experiment(config, overrides)
    store = open_store(experiment, artifact_root)
    title = f"{experiment.name}: {redact(store.root_uri)}" + (" (every file re-hashed)" if verify else "")
    table = Table("stage", "state", "key", "size", "path", title=title)
    at = current_round(experiment, store, verify)
    planned = plan(at, store, verify=verify)
    for item in planned:
        state = item.status.state.value
        if item.status.reason:
            state += f" ({item.status.reason})"
        size = human_bytes(item.status.size_bytes) if item.status.size_bytes else "-"
        table.add_row(item.stage.name, state, item.key, size, store.path(item.stage.name, item.key))
    table_console().print(table)
    if experiment.select is not None:
        table_console().print(selection_line(at), highlight=False)
    downloading = any(item.stage.name == "download" and item.status.state != ArtifactState.CACHED for item in planned)
    for problem in input_problems(experiment.download) if downloading else []:
        table_console().print(f"input: {problem}", highlight=False)
    invalid = [item.stage.name for item in planned if item.status.state == ArtifactState.INVALID]
    if verify and invalid:
        fail(f"{len(invalid)} artifact(s) do not match their manifest: {', '.join(invalid)} "
             "(the next nmt run recomputes them)", 1)
