"""The workers' progress bars as the driver draws them (pipeline/worker_bars.py), from
the state lines Ray's tqdm_ray sends, on a console that records what it prints."""

from __future__ import annotations

import io

from rich.console import Console

from pipeline.worker_bars import WorkerBars


def _state(uuid: str, x: int, closed: bool = False, ip: str = "10.0.0.1") -> dict:
    return {"__magic_token__": "__ray_tqdm_magic_token__", "x": x, "pos": 0, "desc": "train t", "total": 200,
            "unit": "update", "ip": ip, "pid": 7, "uuid": uuid, "closed": closed}


def _bars() -> tuple[WorkerBars, io.StringIO]:
    written = io.StringIO()
    return WorkerBars(Console(file=written, force_terminal=True, width=100), here="10.0.0.1"), written


def test_a_bar_is_a_row_while_open_and_one_line_once_closed():
    bars, written = _bars()
    bars.show(_state("a", 0))
    bars.show(_state("a", 120))
    task = bars.progress.tasks[0]
    assert (task.description, task.completed, task.total) == ("train t", 120, 200)
    bars.show(_state("a", 200, closed=True))
    assert bars.progress.tasks == [] and bars.open == {}
    bars.stop()
    assert written.getvalue().count("train t: 200/200 update (100%), done in 0s") == 1


def test_bars_of_other_nodes_name_their_node_and_stop_drops_the_open_ones():
    bars, _ = _bars()
    bars.show(_state("a", 5))
    bars.show(_state("b", 9, ip="10.0.0.2"))
    assert [task.description for task in bars.progress.tasks] == ["train t", "(10.0.0.2) train t"]
    bars.stop()
    assert bars.progress is None and bars.open == {}
