"""The train stage's checkpoints, in one place: what one holds, how a worker saves and
restores it, which ones are complete, and what the driver makes of them once training
ends (slimmed older ones, the averaged final weights, the best weights).

A checkpoint is a DeepSpeed checkpoint (every rank writes its shard, under
``DEEPSPEED_TAG``) plus, from rank 0, ``progress.json``, ``history.jsonl`` (every logged
row so far) and ``best.pt`` (the best validated weights). The worker's session (``session.py``) persists
it to the run's storage: Ray Train, which also hands the newest one back through
``ray.train.get_checkpoint()`` when it restarts a worker group, or, for a run in the
stage's own process, the session itself.

The storage is on the artifact store, which every node reaches: a local directory,
or a prefix of an object store (any pyarrow filesystem). Every rank also writes
``files.rank<N>.json``, the size of each file it wrote. A checkpoint directory is
complete when every rank's list is there and every file in it has its listed size: a
worker killed while Ray Train persisted its files (they are copied in no fixed order)
leaves present but cut-off files, and such a checkpoint is skipped, never resumed from. Once training ends, every checkpoint but the newest is
slimmed to its consolidated fp32 ``weights.pt`` (what averaging needs), dropping
DeepSpeed's optimizer states; such a checkpoint can be averaged but not resumed.

With ``train.resume_every``, only some checkpoints are DeepSpeed's: the ones between are
snapshots, ``snapshot_<step>/`` beside them, written by rank 0 alone (``save_snapshot``):
the fp32 weights and ``progress.json``, about a third of a checkpoint (Adam keeps two
moments per weight) and one file, not a sharded save. They are what averaging reads in
a run's last updates; no run resumes from one. Consolidated fp32 weights
come from DeepSpeed's own ``zero_to_fp32`` for ZeRO stages 1-3 (the optimizer's fp32
master copy, gathered from every rank's partition) and from the model states file
for stage 0, where every rank holds the whole model.
"""

from __future__ import annotations

import json
import posixpath
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import torch

from stages.train.progress import TrainingProgress

DEEPSPEED_TAG = "deepspeed"
WEIGHTS = "weights.pt"  # a slimmed checkpoint's or a snapshot's consolidated fp32 weights
SNAPSHOT = "snapshot_"  # the name of a weights-only snapshot's directory starts with it
# How the engine holds its states. 2: bf16 keeps fp32 weights and torch's Adam under
# torch.autocast on a GPU too (deepspeed_config.py); before, a GPU's bf16 run saved the
# states of DeepSpeed's bf16 optimizer wrapper, which this engine cannot load.
ENGINE_LAYOUT = 2


class IncompatibleCheckpoint(Exception):
    """A checkpoint written by an engine whose states this one cannot load."""


@dataclass(frozen=True)
class SavedCheckpoint:
    path: Path  # a local directory; for one still on an object store, its path there
    step: int
    progress: dict
    resumable: bool = True  # DeepSpeed's files (optimizer states included) are all there

    @property
    def snapshot(self) -> bool:
        """A weights-only snapshot (``save_snapshot``), not a DeepSpeed checkpoint."""
        return posixpath.basename(str(self.path)).startswith(SNAPSHOT)


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
    sizes = {info.path: info.size for info in listing if info.type == pafs.FileType.File}
    found = []
    for progress_file in sorted(path for path in sizes if path.endswith("/progress.json")):
        directory = posixpath.dirname(progress_file)
        name = posixpath.basename(directory)
        if name.startswith(SNAPSHOT):
            # Rank 0 wrote it alone; complete once its files all reached the storage.
            resumable, averageable = False, (f"{directory}/{WEIGHTS}" in sizes
                                             and _persisted_whole(filesystem, sizes, directory, 0))
        elif name.startswith("checkpoint_"):
            # Slimmed on the local disk after training, the weights renamed into place.
            averageable = f"{directory}/{WEIGHTS}" in sizes
            resumable = not averageable and _deepspeed_files_present(
                set(sizes), f"{directory}/{DEEPSPEED_TAG}", world_size, zero_stage) and all(
                _persisted_whole(filesystem, sizes, directory, rank) for rank in range(world_size))
        else:
            continue
        if not resumable and not averageable:
            continue
        try:
            progress = _read_json(filesystem, progress_file)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue  # cut off while being persisted
        path = Path(directory) if isinstance(filesystem, pafs.LocalFileSystem) else directory
        found.append(SavedCheckpoint(path, progress["step"], progress, resumable))
    # A resumable checkpoint last among those of one step: the one a run ends with.
    return sorted(found, key=lambda checkpoint: (checkpoint.step, checkpoint.resumable))


def newest_resumable(run_dir: str, filesystem: pafs.FileSystem, world: int, zero_stage: int, session):
    """In a worker: the newest complete, resumable checkpoint of this run on its storage,
    else the one its session hands back (Ray Train's ``get_checkpoint``), else None.

    The storage comes first: Ray Train hands back only checkpoints it registered, and a
    worker that dies after its checkpoint was persisted but before Ray Train registered
    it (or a stage killed before Ray's snapshot named it) would otherwise restart the
    run from nothing. Every worker of a group sees the same listing, so all pick the
    same checkpoint."""
    import ray.train

    stored = [c for c in complete_checkpoints(run_dir, world, zero_stage, filesystem) if c.resumable]
    if stored:
        return ray.train.Checkpoint(str(stored[-1].path), filesystem=filesystem)
    return session.handed_back()


def save(engine, rank: int, progress: TrainingProgress, history: list[dict], best: dict | None, session) -> None:
    """In every worker (each writes its DeepSpeed shard): a checkpoint of this moment,
    handed to the worker's session, which persists it to the run's storage."""
    progress.last_checkpoint_step = progress.step
    progress.engine_layout = ENGINE_LAYOUT
    with tempfile.TemporaryDirectory(prefix="nmt-checkpoint-") as directory:
        engine.save_checkpoint(directory, tag=DEEPSPEED_TAG)
        if rank == 0:
            root = Path(directory)
            with open(root / "history.jsonl", "w") as handle:
                handle.writelines(json.dumps(row) + "\n" for row in history)
            if best is not None:
                torch.save(best, root / "best.pt")
            (root / "progress.json").write_text(json.dumps(progress.to_json(), indent=2))
        _write_file_sizes(Path(directory), rank)
        # What reaches Ray Tune with the checkpoint, for a tuning trial: the best
        # validation loss so far (stages/tune/trials.py).
        metrics = {"step": progress.step, "train_tokens": progress.train_tokens, "train_flops": progress.train_flops,
                   "best_valid_loss": progress.best_valid_loss}
        session.report(metrics, directory)


def save_snapshot(engine, rank: int, progress: TrainingProgress, run_dir: str, filesystem: pafs.FileSystem,
                  keep: int) -> None:
    """In every worker (ZeRO-3 gathers the weights from all of them): a weights-only
    snapshot of this moment, which rank 0 writes to ``run_dir``/snapshot_<step>; the
    newest ``keep`` snapshots stay. It leaves ``progress.last_checkpoint_step`` alone:
    that is the update a run can resume from."""
    weights = rank0_weights(engine, rank)
    if weights is None:
        return
    with tempfile.TemporaryDirectory(prefix="nmt-snapshot-") as directory:
        root = Path(directory)
        torch.save(weights, root / WEIGHTS)
        (root / "progress.json").write_text(json.dumps(progress.to_json(), indent=2))
        _write_file_sizes(root, 0)
        persist(directory, run_dir, f"{SNAPSHOT}{progress.step:09d}", filesystem)
    for _, path in _snapshot_directories(run_dir, filesystem)[:-keep]:
        filesystem.delete_dir(path)


def drop_snapshots_after(run_dir: str, filesystem: pafs.FileSystem, step: int) -> None:
    """Delete the snapshots an earlier attempt wrote after the checkpoint a run resumes
    from at ``step``: the run writes them again, and one it might not reach (a wall-time
    budget ends sooner) must not be averaged in or taken for the run's last. A snapshot
    cut off by a crash is always among them: nothing was saved after it."""
    for written, path in _snapshot_directories(run_dir, filesystem):
        if written > step:
            filesystem.delete_dir(path)


def _snapshot_directories(run_dir: str, filesystem: pafs.FileSystem) -> list[tuple[int, str]]:
    """(step, path) of every snapshot directory in ``run_dir``, oldest first, by name
    alone: one listing, no file read."""
    try:
        listing = filesystem.get_file_info(pafs.FileSelector(run_dir, allow_not_found=True))
    except OSError:  # an object store's bucket that does not exist yet
        return []
    found = []
    for info in listing:
        name = posixpath.basename(info.path)
        if info.type == pafs.FileType.Directory and name.startswith(SNAPSHOT) and name[len(SNAPSHOT):].isdigit():
            found.append((int(name[len(SNAPSHOT):]), info.path))
    return sorted(found)


def persist(directory: str, run_dir: str, name: str, filesystem: pafs.FileSystem) -> None:
    """Copy a local checkpoint ``directory`` to ``run_dir``/``name`` on ``filesystem``,
    replacing one an earlier attempt left there. On a local disk the copy lands under a
    hidden name and is renamed: there whole or not at all. On an object store, where a
    rename is a copy, the size lists written last (``_write_file_sizes``) tell a cut-off one."""
    target = posixpath.join(run_dir, name)
    local = isinstance(filesystem, pafs.LocalFileSystem)
    staging = posixpath.join(run_dir, f".{name}.{uuid.uuid4().hex[:8]}") if local else target
    if filesystem.get_file_info(target).type != pafs.FileType.NotFound:
        filesystem.delete_dir(target)
    filesystem.create_dir(staging, recursive=True)  # copy_files makes only the directories inside
    pafs.copy_files(directory, staging, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=filesystem)
    if local:
        filesystem.move(staging, target)


def restore(engine, directory: Path) -> tuple[TrainingProgress, list[dict], dict | None]:
    """In every worker: the engine's state from a checkpoint, and its progress, logged
    rows and best weights."""
    progress = TrainingProgress.from_json(json.loads((directory / "progress.json").read_text()))
    hardware = progress.hardware
    if progress.engine_layout < 2 and hardware.get("precision") == "bf16" and hardware.get("device") == "cuda":
        raise IncompatibleCheckpoint(
            f"checkpoint {directory}: written in bf16 on a GPU by an earlier version, whose engine kept DeepSpeed's "
            "bf16 optimizer states; this version trains bf16 with fp32 weights under torch.autocast and cannot "
            "resume it. Train the run again from the start (nmt run --force train/<model>), or finish it with the "
            "version that wrote it")
    engine.load_checkpoint(str(directory), tag=DEEPSPEED_TAG)
    history = [json.loads(line) for line in (directory / "history.jsonl").read_text().splitlines() if line]
    best = torch.load(directory / "best.pt", weights_only=True) if (directory / "best.pt").is_file() else None
    return progress, history, best


def best_weights(engine) -> dict:
    """The weights to keep as the best so far: fp32, on the CPU. Under ZeRO-3 the
    parameters are partitioned, so they are gathered (every rank must call this); below
    stage 3 each rank holds them whole."""
    if engine.zero_optimization_stage() == 3:
        state = engine._zero3_consolidated_16bit_state_dict() or {}
    else:
        state = engine.module.state_dict()
    # One copy per tensor, not per name: a tied weight (the Transformer's joint embedding
    # is also its target embedding and output projection) stays one tensor, saved once.
    copies: dict[tuple, torch.Tensor] = {}
    weights = {}
    for name, tensor in state.items():
        identity = (tensor.device, tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride())
        if identity not in copies:
            copies[identity] = tensor.detach().float().cpu().clone()
        weights[name] = copies[identity]
    return weights


def rank0_weights(engine, rank: int) -> dict | None:
    """``best_weights`` on rank 0, None on the others. Every rank must call it: under
    ZeRO-3 the gather is collective, and a rank that stayed out would leave rank 0
    waiting for it; below stage 3 the other ranks skip the copy."""
    if rank != 0 and engine.zero_optimization_stage() != 3:
        return None
    weights = best_weights(engine)
    return weights if rank == 0 else None


def saved_best(checkpoint: SavedCheckpoint) -> dict[str, torch.Tensor] | None:
    """A local checkpoint's best validated weights, if it has any."""
    path = checkpoint.path / "best.pt"
    return torch.load(path, weights_only=True) if path.is_file() else None


def saved_history(checkpoint: SavedCheckpoint) -> str:
    """A local checkpoint's logged rows, as the JSON lines it holds."""
    return (checkpoint.path / "history.jsonl").read_text()


def final_weights(checkpoints: list[SavedCheckpoint], averaged_steps: list[int], zero_stage: int,
                  model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """On the driver, once training ended: the average of the fp32 weights of the
    checkpoints at ``averaged_steps`` (Vaswani et al. 2017, section 6.1; which ones:
    ``plan.averaged``), with every name of a tied parameter filled in; every other
    checkpoint is slimmed on the way (``slim``)."""
    steps = set(averaged_steps)
    averaged = {c.step: checkpoint_weights(c, zero_stage) for c in checkpoints if c.step in steps}
    for checkpoint in checkpoints[:-1]:
        if checkpoint.resumable:
            slim(checkpoint, averaged.get(checkpoint.step) or checkpoint_weights(checkpoint, zero_stage))
    return fill_tied_weights(average_weights(list(averaged.values())), model)


def _file_sizes_name(rank: int) -> str:
    return f"files.rank{rank}.json"


def _write_file_sizes(directory: Path, rank: int) -> None:
    """The size of every file this rank wrote into its checkpoint directory, written last."""
    sizes = {path.relative_to(directory).as_posix(): path.stat().st_size
             for path in sorted(directory.rglob("*")) if path.is_file()}
    (directory / _file_sizes_name(rank)).write_text(json.dumps(sizes, indent=1))


def _persisted_whole(filesystem: pafs.FileSystem, sizes: dict[str, int], directory: str, rank: int) -> bool:
    """Whether ``rank``'s files all reached the storage at the sizes the rank wrote."""
    listed = f"{directory}/{_file_sizes_name(rank)}"
    if listed not in sizes:
        return False
    try:
        expected = _read_json(filesystem, listed)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return all(sizes.get(f"{directory}/{name}") == size for name, size in expected.items())


def _read_json(filesystem: pafs.FileSystem, path: str):
    with filesystem.open_input_stream(path) as stream:
        return json.loads(stream.read().decode("utf-8"))


def _deepspeed_files_present(files: set[str], directory: str, world_size: int, zero_stage: int) -> bool:
    """Whether DeepSpeed's files for every rank are among ``files``. Below ZeRO-3 rank 0
    writes the whole module's states; under ZeRO-3 each rank writes its partition's. From
    stage 1 on, each rank writes its optimizer partition."""
    def every_rank_wrote(suffix: str) -> bool:
        return all(any(path.startswith(f"{directory}/") and path.endswith(f"zero_pp_rank_{rank}_{suffix}")
                       for path in files) for rank in range(world_size))

    if zero_stage == 3:
        if not every_rank_wrote("mp_rank_00_model_states.pt"):
            return False
    elif f"{directory}/mp_rank_00_model_states.pt" not in files:
        return False
    return zero_stage == 0 or every_rank_wrote("mp_rank_00_optim_states.pt")


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
    # Written under another name first: ``complete_checkpoints`` takes a checkpoint
    # with this file for a slimmed one, so it must never be seen half written.
    partial = checkpoint.path / f"{WEIGHTS}.partial"
    torch.save(weights, partial)
    partial.replace(checkpoint.path / WEIGHTS)
    shutil.rmtree(checkpoint.path / DEEPSPEED_TAG, ignore_errors=True)
    (checkpoint.path / "best.pt").unlink(missing_ok=True)  # the newest checkpoint's is the one kept


def fp32_weights(checkpoint: Path, zero_stage: int) -> dict[str, torch.Tensor]:
    if zero_stage >= 1:
        from stages.train.engine import import_deepspeed

        import_deepspeed()  # as the workers import it: quietly, and without MLflow
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
