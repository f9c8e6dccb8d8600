"""How long a request may hold a decoder, predicted from what its search may do and a
measurement of the replica's decoder at start-up: which lane it belongs in.

A search advances all its hypotheses together, one token a step, until each sentence's
output limit at worst (what ``min_length`` forces, and what a model that never ends a
sentence does). So its worst-case time is its depth (the longest output limit: steps
taken one after another) times the time of one step, which grows with its width (the
rows each step computes: beam size times sentences):

    seconds = depth x (per_step_s + per_row_s x width)

Counting hypothesis steps alone (beam x limit, summed) told a long search of one sentence
from a wide one of many short sentences no better than their product: one request of
8,192 steps (beam 16, 512 tokens forced by ``min_length``) held the normal lane for
seconds, 512 steps one after another, while 64 short sentences of the same count decode
in parallel in a fraction of that.

``measure`` times two searches forced to a fixed length (``min_length``) when the
replica starts: one narrow, one wide; the two coefficients follow.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from stages.shared.inference.search import SearchSettings

PROBE_STEPS = 24  # decoder steps each probe is forced to take
NARROW, WIDE = (1, 1), (4, 8)  # (sentences, beam) of the two probes
PROBE_SOURCE = list(range(4, 16))  # twelve ordinary token ids (past the special ones)


@dataclass(frozen=True)
class DecodeTime:
    per_step_s: float  # what a decoder step costs whatever its width
    per_row_s: float  # what each hypothesis row adds to a step

    def seconds(self, depth: int, width: int) -> float:
        """The worst-case time of a search ``depth`` steps deep and ``width`` rows wide."""
        return depth * (self.per_step_s + self.per_row_s * width)


def search_shape(search: SearchSettings, source_lengths: list[int],
                 model_limit_of: Callable[[int], int | None]) -> tuple[int, int]:
    """(depth, width) of a request: its longest output limit, and beam x sentences."""
    depth = max(search.output_length_limit(length, model_limit_of(length)) for length in source_lengths)
    return depth, search.beam_size * len(source_lengths)


def measure(decode: Callable[[list[list[int]], SearchSettings], object]) -> DecodeTime:
    """The decoder's two coefficients, from a narrow and a wide search forced to
    ``PROBE_STEPS`` steps (each decoded twice: the first warms its kernels up)."""
    timed = {}
    for sentences, beam in (NARROW, WIDE):
        search = SearchSettings(beam_size=beam, nbest=1, max_length_a=0.0, max_length_b=PROBE_STEPS,
                                min_length=PROBE_STEPS - 1)
        sources = [PROBE_SOURCE] * sentences
        decode(sources, search)
        started = time.perf_counter()
        decode(sources, search)
        timed[sentences * beam] = (time.perf_counter() - started) / PROBE_STEPS
    (narrow, narrow_s), (wide, wide_s) = sorted(timed.items())
    per_row = max(0.0, (wide_s - narrow_s) / (wide - narrow))
    return DecodeTime(per_step_s=max(1e-6, narrow_s - per_row * narrow), per_row_s=per_row)
