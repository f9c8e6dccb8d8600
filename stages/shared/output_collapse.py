"""How collapsed a model's outputs are: the share of inputs given its most frequent output
line, and the share of distinct lines. Measured by the evaluate stage on its beam
outputs, and by the report on outputs evaluated before the stage measured it."""

from __future__ import annotations

from collections import Counter


def collapse(hypotheses: list[str]) -> dict:
    """``top_output_share``: the share of inputs whose output is the most frequent output
    line; ``top_output``: that line; ``distinct_output_share``: distinct lines over inputs."""
    if not hypotheses:
        raise ValueError("no outputs to measure")
    line, times = Counter(hypotheses).most_common(1)[0]
    return {"top_output_share": times / len(hypotheses), "top_output": line,
            "distinct_output_share": len(set(hypotheses)) / len(hypotheses)}
