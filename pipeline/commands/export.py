"""``nmt export``: a trained model as a CTranslate2 or Hugging Face model directory."""

from __future__ import annotations

from pathlib import Path

from pipeline.commands.console import console
from pipeline.commands.output import fail
from pipeline.commands.translate import model_file
from stages.shared.export import ExportError, export_model
from stages.shared.inference.model_file import ModelFileError


def export_files(model: Path, model_name: str | None, format: str, output: Path, quantization: str | None,
                 force: bool, artifact_root: str | None, overrides: list[str] = ()) -> None:
    try:
        written = export_model(model_file(model, model_name, artifact_root, overrides), format, output, quantization,
                               force)
    except (ExportError, FileNotFoundError, ModelFileError) as error:
        fail(str(error), 2)
    size = sum(path.stat().st_size for path in written.rglob("*") if path.is_file())
    console.print(f"{format} model in {written} ({size / 2**20:.1f} MiB)")
