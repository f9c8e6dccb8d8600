"""The train stage's checkpoints (stages/train/checkpointer.py): which ones are complete,
and averaging the last ones into the final weights."""

from __future__ import annotations

import json

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


def test_under_zero_stage_3_every_rank_s_model_and_optimizer_partitions_make_a_checkpoint_complete(tmp_path):
    """ZeRO-3 writes no mp_rank_00_model_states.pt: each rank writes its partition's."""
    def zero3_checkpoint(name: str, step: int, model_ranks: tuple[int, ...]) -> None:
        directory = tmp_path / name
        (directory / DEEPSPEED_TAG).mkdir(parents=True)
        (directory / "progress.json").write_text(json.dumps({"step": step}))
        for rank in (0, 1):
            written = {"progress.json": len((directory / "progress.json").read_bytes())} if rank == 0 else {}
            kinds = ("optim", "model") if rank in model_ranks else ("optim",)
            for kind in kinds:
                shard = f"{DEEPSPEED_TAG}/zero_pp_rank_{rank}_mp_rank_00_{kind}_states.pt"
                (directory / shard).write_bytes(b"partition")
                written[shard] = len(b"partition")
            (directory / f"files.rank{rank}.json").write_text(json.dumps(written))

    zero3_checkpoint("checkpoint_000001", 100, model_ranks=(0, 1))
    zero3_checkpoint("checkpoint_000002", 200, model_ranks=(0,))  # rank 1's model partition never written
    assert [c.step for c in complete_checkpoints(tmp_path, world_size=2, zero_stage=3)] == [100]
    assert complete_checkpoints(tmp_path, world_size=2, zero_stage=1) == []  # stage 1 needs the whole module's


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


class StandInEngine:
    """What ``save_snapshot`` asks of a DeepSpeed engine: its ZeRO stage and its module."""

    def __init__(self, value: float):
        self.module = torch.nn.Linear(2, 1)
        torch.nn.init.constant_(self.module.weight, value)

    def zero_optimization_stage(self) -> int:
        return 0


def snapshot_at(tmp_path, step: int, keep: int = 2, rank: int = 0) -> None:
    import pyarrow.fs as pafs

    from stages.train.checkpointer import save_snapshot
    from stages.train.progress import TrainingProgress

    save_snapshot(StandInEngine(float(step)), rank, TrainingProgress(step=step), str(tmp_path),
                  pafs.LocalFileSystem(), keep)


def test_snapshots_hold_the_weights_are_listed_beside_checkpoints_and_the_newest_keep_stay(tmp_path):
    """A snapshot is averageable, never resumable; a checkpoint of the same update sorts
    after it; its own count keeps the newest ``keep`` snapshots and no checkpoint."""
    from stages.train.checkpointer import checkpoint_weights

    write_checkpoint(tmp_path, "checkpoint_000000010", 10)
    for step in (20, 30, 40):
        snapshot_at(tmp_path, step)
    snapshot_at(tmp_path, 50, rank=1)  # only rank 0 writes
    write_checkpoint(tmp_path, "checkpoint_000000040", 40)
    found = complete_checkpoints(tmp_path, world_size=1, zero_stage=0)
    assert [(c.step, c.snapshot, c.resumable) for c in found] == [(10, False, True), (30, True, False),
                                                                 (40, True, False), (40, False, True)]
    assert checkpoint_weights(found[1], 0)["weight"].eq(30.0).all()
    assert not list(tmp_path.glob(".snapshot_*"))  # nothing left under its staging name


def test_a_snapshot_cut_off_on_its_way_to_the_storage_is_not_listed(tmp_path):
    snapshot_at(tmp_path, 20)
    snapshot_at(tmp_path, 30)
    (tmp_path / "snapshot_000000030" / WEIGHTS).write_bytes(b"cut")
    assert [c.step for c in complete_checkpoints(tmp_path, world_size=1, zero_stage=0)] == [20]


def test_a_resumed_run_drops_the_snapshots_after_its_checkpoint(tmp_path):
    """An earlier attempt's snapshots past the checkpoint a run resumes from would be
    averaged in, or taken for the run's last, if the run stopped sooner this time."""
    import pyarrow.fs as pafs

    from stages.train.checkpointer import drop_snapshots_after

    write_checkpoint(tmp_path, "checkpoint_000000020", 20)
    for step in (10, 30, 40):
        snapshot_at(tmp_path, step, keep=5)
    drop_snapshots_after(str(tmp_path), pafs.LocalFileSystem(), 20)
    assert [c.step for c in complete_checkpoints(tmp_path, world_size=1, zero_stage=0)] == [10, 20]
    drop_snapshots_after(str(tmp_path / "missing"), pafs.LocalFileSystem(), 20)  # a run with no storage yet


def test_a_tied_weight_is_one_tensor_in_the_saved_weights(tmp_path):
    """best.pt and snapshots hold a weight shared by several modules once, not per name."""
    from stages.train.checkpointer import best_weights

    engine = StandInEngine(1.0)
    engine.module = torch.nn.Sequential(torch.nn.Embedding(1000, 64), torch.nn.Linear(64, 1000, bias=False))
    engine.module[1].weight = engine.module[0].weight
    weights = best_weights(engine)
    assert weights["0.weight"] is weights["1.weight"]
    torch.save(weights, tmp_path / "w.pt")
    assert (tmp_path / "w.pt").stat().st_size < 1.2 * 1000 * 64 * 4
