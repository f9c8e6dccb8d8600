"""Wall-clock marks of where a stage's time goes, read by benchmarks/orchestration/stage_overhead.py
and benchmarks/orchestration/preemption.py (a train stage also marks each update).

Off unless ``NMT_TIMELINE`` names a file. Then every process that reaches a mark (the
driver's stage task, a Ray Train worker) appends one JSON line to it: the stage, the
event and the time. Lines this short are written whole by one ``write`` in append mode,
so processes on one machine do not interleave them.
"""

from __future__ import annotations

import json
import os
import time

ENV = "NMT_TIMELINE"


def mark(stage: str, event: str) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({"stage": stage, "event": event, "time": time.time()}) + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line)
