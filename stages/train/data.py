"""A tokenized split read from the tokenize artifact's Arrow shards, memory-mapped.

The shards are Arrow IPC streams; ``pa.memory_map`` lets every worker on a node share
the same pages of the OS cache instead of each loading its own copy. The token ids of
all shards are kept as one flat int32 array plus offsets, so a batch is a numpy
gather, not a Python loop over rows.

Sequences in the artifact end with EOS. For teacher forcing the decoder reads
``BOS y1 .. yn`` (``tgt_in``) and predicts ``y1 .. yn EOS`` (``tgt_out``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from stages.tokenize import read_index, shard_files


@dataclass(frozen=True)
class Batch:
    src: Tensor  # (B, S) int64, padded
    tgt_in: Tensor  # (B, T)
    tgt_out: Tensor  # (B, T)
    src_lengths: np.ndarray
    tgt_lengths: np.ndarray

    @property
    def target_tokens(self) -> int:
        return int(self.tgt_lengths.sum())


class TokenizedSplit:
    def __init__(self, artifact: Path, split: str):
        index = read_index(artifact)
        self.vocab = index["vocab"]
        specials = self.vocab["special_ids"]
        self.pad_id, self.bos_id = specials["pad"], specials["bos"]
        files = shard_files(artifact, split)
        tables = [pa.ipc.open_stream(pa.memory_map(str(path))).read_all() for path in files]
        table = pa.concat_tables(tables).combine_chunks()
        self.src_lengths = table.column("src_len").to_numpy().astype(np.int64)
        self.tgt_lengths = table.column("tgt_len").to_numpy().astype(np.int64)
        self._src = _flat(table.column("src_ids"))
        self._tgt = _flat(table.column("tgt_ids"))

    def __len__(self) -> int:
        return len(self.src_lengths)

    def batch(self, indices: np.ndarray) -> Batch:
        src_lengths, tgt_lengths = self.src_lengths[indices], self.tgt_lengths[indices]
        src = self._padded(self._src, indices, src_lengths)
        tgt_out = self._padded(self._tgt, indices, tgt_lengths)
        tgt_in = torch.cat([torch.full((len(indices), 1), self.bos_id, dtype=torch.long), tgt_out[:, :-1]], dim=1)
        tgt_in = tgt_in.masked_fill(tgt_out == self.pad_id, self.pad_id)
        return Batch(src, tgt_in, tgt_out, src_lengths, tgt_lengths)

    def token_ids(self, side: str, indices) -> list[list[int]]:
        """The ``side`` ("src" or "tgt") sequences of the pairs at ``indices``, EOS included."""
        values, offsets = self._src if side == "src" else self._tgt
        return [values[offsets[index]:offsets[index + 1]].tolist() for index in indices]

    def _padded(self, flat: tuple[np.ndarray, np.ndarray], indices: np.ndarray, lengths: np.ndarray) -> Tensor:
        values, offsets = flat
        width = int(lengths.max(initial=1))
        out = np.full((len(indices), width), self.pad_id, dtype=np.int64)
        columns = np.arange(width)
        inside = columns[None, :] < lengths[:, None]
        positions = offsets[indices][:, None] + columns[None, :]
        out[inside] = values[positions[inside]]
        return torch.from_numpy(out)


def _flat(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a list<int32> column whose chunks were combined into one."""
    array = column.chunk(0) if column.num_chunks else pa.array([], pa.list_(pa.int32()))
    offsets = array.offsets.to_numpy().astype(np.int64)
    return array.values.to_numpy(zero_copy_only=False), offsets
