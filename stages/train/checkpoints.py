"""The checkpoints a training run left in its Ray Train storage, read on the driver.

A checkpoint directory is complete when rank 0's ``progress.json`` is there and
DeepSpeed's files for every rank are too: a run killed while a checkpoint was being
persisted leaves one that is skipped, never resumed from. Consolidated fp32 weights
come from DeepSpeed's own ``zero_to_fp32`` for ZeRO stages 1-3 (the optimizer's fp32
master copy, gathered from every rank's partition) and from the model states file
for stage 0, where every rank holds the whole model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from stages.train.loop import DEEPSPEED_TAG


@dataclass(frozen=True)
class SavedCheckpoint:
    path: Path
    step: int
    progress: dict


def complete_checkpoints(storage: Path, world_size: int, zero_stage: int) -> list[SavedCheckpoint]:
    """Complete checkpoints under ``storage`` (Ray Train's run directory), oldest first."""
    found = []
    for progress_file in storage.glob("**/checkpoint_*/progress.json"):
        directory = progress_file.parent
        if not _deepspeed_files_present(directory / DEEPSPEED_TAG, world_size, zero_stage):
            continue
        try:
            progress = json.loads(progress_file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue  # cut off while being persisted
        found.append(SavedCheckpoint(directory, progress["step"], progress))
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def _deepspeed_files_present(directory: Path, world_size: int, zero_stage: int) -> bool:
    if not (directory / "mp_rank_00_model_states.pt").is_file():
        return False
    if zero_stage == 0:
        return True
    return all(any(directory.glob(f"*zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")) for rank in range(world_size))


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
