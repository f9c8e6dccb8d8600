"""A replica's lanes: short requests and costly (bulk) ones, each with its own decoder,
batcher and bound on the requests it holds.

A lane that holds ``limit`` requests (queued or decoding) refuses the next at once
(``LaneFull``: the service answers 503 with Retry-After), where Ray Serve would have
queued it without limit: 150 clients each keeping one costly request in flight made
every short request wait up to 110 s, and /health time out. The bulk lane's bound is
small, so costly requests never take the replica's slots from short ones.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from pipeline.serving.batcher import DynamicBatcher


class LaneFull(Exception):
    """A lane holds all the requests it may."""


@dataclass
class Lane:
    name: str  # "normal" or "bulk", for messages and stats
    batcher: DynamicBatcher
    limit: int  # requests held at once, queued or decoding
    held: int = field(default=0, init=False)

    @contextmanager
    def admitted(self) -> Iterator[DynamicBatcher]:
        """Holds a place in the lane for one request while the block runs; ``LaneFull``
        at once if there is none."""
        if self.held >= self.limit:
            raise LaneFull(f"the {self.name} lane holds {self.held} requests, its limit")
        self.held += 1  # one event loop: no lock needed
        try:
            yield self.batcher
        finally:
            self.held -= 1
