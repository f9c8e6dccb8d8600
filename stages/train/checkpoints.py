"""The checkpoints a training run left in its Ray Train storage, read on the driver.

The storage is on the artifact store, which every node reaches: a local directory,
or a prefix of an object store (any pyarrow filesystem). A checkpoint directory is
complete when rank 0's ``progress.json`` is there and DeepSpeed's files for every rank
are too: a run killed while a checkpoint was being persisted leaves one that is
skipped, never resumed from. Once training ends, every checkpoint but the newest is
slimmed to its consolidated fp32 ``weights.pt`` (what averaging needs), dropping
DeepSpeed's optimizer states; such a checkpoint can be averaged but not resumed. Consolidated fp32 weights
come from DeepSpeed's own ``zero_to_fp32`` for ZeRO stages 1-3 (the optimizer's fp32
master copy, gathered from every rank's partition) and from the model states file
for stage 0, where every rank holds the whole model.
"""

from __future__ import annotations

import json
import posixpath
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import torch

from stages.train.loop import DEEPSPEED_TAG

WEIGHTS = "weights.pt"  # a slimmed checkpoint's consolidated fp32 weights


@dataclass(frozen=True)
class SavedCheckpoint:
    path: Path  # a local directory; for one still on an object store, its path there
    step: int
    progress: dict
    resumable: bool = True  # DeepSpeed's files (optimizer states included) are all there


def complete_checkpoints(storage: Path | str, world_size: int, zero_stage: int,
                         filesystem: pafs.FileSystem | None = None) -> list[SavedCheckpoint]:
    """Complete checkpoints under ``storage`` (Ray Train's run directory, on the local
    disk or on ``filesystem``), oldest first."""
    filesystem = filesystem or pafs.LocalFileSystem()
    root = str(storage)
    try:
        listing = filesystem.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except OSError:  # an object store's bucket that does not exist yet
        return []
    files = {info.path for info in listing if info.type == pafs.FileType.File}
    found = []
    for progress_file in sorted(path for path in files if path.endswith("/progress.json")):
        directory = posixpath.dirname(progress_file)
        if not posixpath.basename(directory).startswith("checkpoint_"):
            continue
        resumable = _deepspeed_files_present(files, f"{directory}/{DEEPSPEED_TAG}", world_size, zero_stage)
        if not resumable and f"{directory}/{WEIGHTS}" not in files:
            continue
        try:
            with filesystem.open_input_stream(progress_file) as stream:
                progress = json.loads(stream.read().decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue  # cut off while being persisted
        path = Path(directory) if isinstance(filesystem, pafs.LocalFileSystem) else directory
        found.append(SavedCheckpoint(path, progress["step"], progress, resumable))
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def _deepspeed_files_present(files: set[str], directory: str, world_size: int, zero_stage: int) -> bool:
    if f"{directory}/mp_rank_00_model_states.pt" not in files:
        return False
    if zero_stage == 0:
        return True
    return all(any(path.startswith(f"{directory}/") and path.endswith(f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
                   for path in files) for rank in range(world_size))


def download_checkpoints(checkpoints: list[SavedCheckpoint], filesystem: pafs.FileSystem,
                         destination: Path) -> None:
    """Copy checkpoints from an object store into ``destination`` (the stage's output)."""
    for checkpoint in checkpoints:
        target = destination / posixpath.basename(str(checkpoint.path))
        if not (target / "progress.json").is_file():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            pafs.copy_files(str(checkpoint.path), str(target), source_filesystem=filesystem,
                            destination_filesystem=pafs.LocalFileSystem())


def checkpoint_weights(checkpoint: SavedCheckpoint, zero_stage: int) -> dict[str, torch.Tensor]:
    """A local checkpoint's fp32 weights, slimmed or not."""
    if (checkpoint.path / WEIGHTS).is_file():
        return torch.load(checkpoint.path / WEIGHTS, weights_only=True)
    return fp32_weights(checkpoint.path, zero_stage)


def slim(checkpoint: SavedCheckpoint, weights: dict[str, torch.Tensor]) -> None:
    """Keep only a local checkpoint's fp32 weights, progress and history: DeepSpeed's
    optimizer states are what make a checkpoint large, and only the newest resumes."""
    torch.save(weights, checkpoint.path / WEIGHTS)
    shutil.rmtree(checkpoint.path / DEEPSPEED_TAG, ignore_errors=True)
    (checkpoint.path / "best.pt").unlink(missing_ok=True)  # the newest checkpoint's is the one kept


def fp32_weights(checkpoint: Path, zero_stage: int) -> dict[str, torch.Tensor]:
    if zero_stage >= 1:
        from deepspeed.utils.zero_to_fp32 import (
            get_fp32_state_dict_from_zero_checkpoint,
        )

        state = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint), tag=DEEPSPEED_TAG)
    else:
        state = torch.load(checkpoint / DEEPSPEED_TAG / "mp_rank_00_model_states.pt", map_location="cpu",
                           weights_only=False)["module"]
    return {name: tensor.float() for name, tensor in state.items()}


def fill_tied_weights(state: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Add the names of tied parameters that a consolidated state dict lacks.

    zero_to_fp32 writes a parameter shared by several modules (the Transformer's joint
    embedding is also its target embedding and output projection) under the names
    DeepSpeed recorded, which need not be every name ``load_state_dict`` expects.
    """
    names_by_tensor: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        names_by_tensor.setdefault(id(tensor), []).append(name)
    filled = dict(state)
    for names in names_by_tensor.values():
        present = next((name for name in names if name in filled), None)
        if present is not None:
            for name in names:
                filled.setdefault(name, filled[present])
    return filled


def average_weights(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of several checkpoints' weights (Vaswani et al. 2017, section 6.1)."""
    return {name: torch.stack([state[name] for state in states]).mean(dim=0) for name in states[0]}
