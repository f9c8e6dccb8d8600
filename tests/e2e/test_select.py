"""Select, then confirm, through ``nmt run`` on the smoke slice: two families, two sizes
each, chosen on one selection seed, the choice trained again on two fresh seeds, and a
report that shows every candidate and the chosen one, compares the fresh seeds alone and
gives no verdict at two seeds a side."""

from __future__ import annotations

import json

import pytest

from tests.helpers import nmt, shipped_config, write_config

pytestmark = pytest.mark.slow


def select_config(directory) -> str:
    """The smoke slice, two families of two widths each at one peak rate and one budget
    (2e11 FLOPs: both translate there, 30-60 s a run on one core)."""
    raw = shipped_config("smoke.yaml")
    raw["name"] = "select_smoke"
    raw["train"] = {"workers": 1, "in_process": True, "precision": "fp32", "max_tokens": 1024, "schedule": "wsd",
                    "lr": 1e-3, "warmup_steps": 10, "decay_fraction": 0.2, "max_train_flops": 2e11,
                    "valid_every": 50, "checkpoint_fraction": 0.25, "keep_checkpoints": 2, "average_fraction": 0.1,
                    "log_every": 10}
    raw["models"] = [{"name": "convs2s", "family": "convs2s", "sizes": ["w32", "w48"]},
                     {"name": "rnn", "family": "rnn", "sizes": ["w32", "w48"],
                      "settings": {"cell": "gru", "attention": "additive"}}]
    raw.update(budgets=[2e11], seeds=[1, 2], select={"seeds": [101], "learning_rates": [8e-3], "max_extensions": 0})
    raw["evaluate"] = {"beam_size": 2, "shards": 1, "greedy": False}
    return str(write_config(directory / "select.yaml", raw))


def test_select_then_confirm_end_to_end(workdir):
    config = select_config(workdir)
    first = nmt("run", config)
    assert first.exit_code == 0, first.output
    (report_dir,) = (workdir / "artifacts" / "report").iterdir()
    report = json.loads((report_dir / "report.json").read_text())
    comparison = report["comparison"]

    # Every candidate at the budget, with its loss, and one chosen per family; the
    # choice sits at an edge of two sizes and may not extend (max_extensions 0).
    selection = {choice["model"]: choice for choice in comparison["selection"]}
    assert set(selection) == {"convs2s", "rnn"}
    for choice in selection.values():
        (at,) = choice["budgets"]
        assert choice["seeds"] == [101] and choice["extend"] == []
        assert [(score["size"], score["lr"]) for score in at["candidates"]] == [("w32", 8e-3), ("w48", 8e-3)]
        assert all(score["valid_loss"] is not None for score in at["candidates"])
        translating = [score for score in at["candidates"] if score["translates"] == "yes"]
        assert (at["size"], at["lr"]) == min(((s["valid_loss"], s["size"], s["lr"]) for s in translating))[1:]
        assert at["size_edge"] in ("smallest", "largest")

    # The compared runs are the chosen configurations on seeds 1 and 2; seed 101 chose
    # and is in no row, interval or test.
    names = [model["name"] for model in report["models"]]
    assert sorted(names) == sorted(f"{family}.{selection[family]['budgets'][0]['size']}.lr8e-3.2e11.s{seed}"
                                   for family in ("convs2s", "rnn") for seed in (1, 2))
    assert not any("s101" in json.dumps(entry) for entry in (comparison["tests"], comparison["intervals"],
                                                             comparison["groups"]))
    (primary,) = [test for test in comparison["tests"] if test["role"] == "primary" and test["metric"] == "BLEU"]
    assert primary["seeds"] == [2, 2] and primary["significant"] is None and primary["p_holm"] is None

    markdown = (report_dir / "report.md").read_text()
    section = markdown.split("## Selection")[1].split("## ")[0]
    assert "chosen on selection seed 101" in section and section.count("| 2e11 ") == 2  # a row per family
    assert "of 2 choices are still at an edge of what was tried" in section
    candidates = (report_dir / "appendix.md").read_text().split("## Selection candidates")[1].split("## ")[0]
    assert candidates.count("| chosen |") == 2
    assert "no verdict with 2 seeds (3 needed)" in markdown.split("## Primary comparisons")[1]
    assert "no verdict with 2 seeds (3 needed)" in first.output  # the console's verdict lines

    # Settled and whole: a second run finds every stage cached, and status says so.
    again = nmt("run", config)
    assert again.exit_code == 0 and " ran " not in again.output.replace("│", " ")
    status = nmt("status", config)
    assert "selection: settled after 1 round(s): convs2s 2e11: w" in status.output
