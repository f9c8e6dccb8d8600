"""The train stage's checkpoints (stages/train/checkpointer.py): which ones are complete,
and averaging the last ones into the final weights."""

from __future__ import annotations

import torch

from stages.train.checkpointer import (
    DEEPSPEED_TAG,
    WEIGHTS,
    average_weights,
    complete_checkpoints,
)


def test_averaging_checkpoints_is_the_elementwise_mean():
    states = [{"w": torch.full((2, 2), float(value)), "b": torch.tensor([value * 2.0])} for value in (1, 2, 6)]
    averaged = average_weights(states)
    assert torch.equal(averaged["w"], torch.full((2, 2), 3.0)) and torch.equal(averaged["b"], torch.tensor([6.0]))


def write_checkpoint(root, name: str, step: int, ranks: tuple[int, ...] = (0,), zero: bool = False,
                     progress: str | None = None, slimmed: bool = False):
    """A checkpoint directory as a run leaves it: rank 0's progress.json and DeepSpeed's
    files of the given ranks (or, slimmed, only the consolidated weights)."""
    import json

    directory = root / name
    deepspeed = directory / DEEPSPEED_TAG
    deepspeed.mkdir(parents=True)
    (directory / "progress.json").write_text(progress if progress is not None else json.dumps({"step": step}))
    if slimmed:
        deepspeed.rmdir()
        torch.save({"w": torch.zeros(1)}, directory / WEIGHTS)
        return directory
    (deepspeed / "mp_rank_00_model_states.pt").write_bytes(b"states")
    for rank in ranks:
        written = {"progress.json": len((directory / "progress.json").read_bytes())} if rank == 0 else {}
        if rank == 0:
            written[f"{DEEPSPEED_TAG}/mp_rank_00_model_states.pt"] = len(b"states")
        if zero:
            shard = f"{DEEPSPEED_TAG}/bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"
            (directory / shard).write_bytes(b"optimizer")
            written[shard] = len(b"optimizer")
        (directory / f"files.rank{rank}.json").write_text(json.dumps(written))
    return directory


def test_only_complete_checkpoints_are_listed_oldest_first(tmp_path):
    write_checkpoint(tmp_path, "checkpoint_000002", 200, ranks=(0, 1), zero=True)
    write_checkpoint(tmp_path, "checkpoint_000000", 100, slimmed=True)
    write_checkpoint(tmp_path, "checkpoint_000003", 300, ranks=(0,), zero=True)  # rank 1's shard never persisted
    write_checkpoint(tmp_path, "checkpoint_000004", 400, ranks=(0, 1), zero=True, progress='{"step": 4')  # cut off
    write_checkpoint(tmp_path, "not_a_checkpoint", 500, ranks=(0, 1), zero=True)
    found = complete_checkpoints(tmp_path, world_size=2, zero_stage=1)
    assert [(c.step, c.resumable) for c in found] == [(100, False), (200, True)]


def test_a_checkpoint_with_a_file_cut_off_while_it_was_persisted_is_not_resumed_from(tmp_path):
    write_checkpoint(tmp_path, "checkpoint_000001", 100, ranks=(0, 1), zero=True)
    cut = write_checkpoint(tmp_path, "checkpoint_000002", 200, ranks=(0, 1), zero=True)
    (cut / DEEPSPEED_TAG / "mp_rank_00_model_states.pt").write_bytes(b"sta")
    unlisted = write_checkpoint(tmp_path, "checkpoint_000003", 300, ranks=(0, 1), zero=True)
    (unlisted / "files.rank1.json").unlink()  # rank 1's list of what it wrote never arrived
    assert [c.step for c in complete_checkpoints(tmp_path, world_size=2, zero_stage=1)] == [100]


def test_under_zero_stage_0_the_model_states_alone_make_a_checkpoint_complete(tmp_path):
    write_checkpoint(tmp_path, "checkpoint_000001", 100, ranks=(0, 1, 2, 3))
    (tmp_path / "checkpoint_000002").mkdir()  # a directory whose files never arrived
    assert [c.step for c in complete_checkpoints(tmp_path, world_size=4, zero_stage=0)] == [100]
    assert complete_checkpoints(tmp_path / "missing", world_size=1, zero_stage=0) == []


def test_a_gpu_bf16_checkpoint_of_the_earlier_engine_layout_is_refused_with_what_to_do(tmp_path):
    """Before ENGINE_LAYOUT 2, a GPU's bf16 run saved DeepSpeed's bf16 optimizer wrapper's
    states: restoring one into this engine is a clear error, before DeepSpeed reads it;
    a CPU's bf16 checkpoint of layout 1 (fp32 weights already) is not refused."""
    import json

    import pytest

    from stages.train.checkpointer import IncompatibleCheckpoint, restore

    class Engine:
        loaded = False

        def load_checkpoint(self, *args, **kwargs):
            self.loaded = True

    old = tmp_path / "gpu"
    old.mkdir()
    (old / "progress.json").write_text(json.dumps({"step": 40, "hardware": {"precision": "bf16", "device": "cuda"}}))
    engine = Engine()
    with pytest.raises(IncompatibleCheckpoint, match=r"written in bf16 on a GPU by an earlier version.*--force"):
        restore(engine, old)
    assert not engine.loaded
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "progress.json").write_text(json.dumps({"step": 40, "hardware": {"precision": "bf16", "device": "cpu"}}))
    (cpu / "history.jsonl").write_text("")
    progress, _, _ = restore(engine, cpu)
    assert engine.loaded and progress.step == 40
