"""A measured figure is stated one way wherever the README and docs state it: the value
its dated report gives. Each quantity below is named by what the sentences that state it
say (``context``); every paragraph that says so and gives a quantity of that kind must
give the report's value, and that value must be in the report."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO

DURATION = r"\b\d+(?:\.\d+)? ?(?:minutes|min|hours|h)\b(?: \d+ (?:min|s)\b)*|\b\d+:\d\d:\d\d\b"
SIZE = r"\b\d+(?:\.\d+)? ?(?:MB|GB|MiB|GiB)\b"


@dataclass(frozen=True)
class Figure:
    name: str
    report: str  # benchmarks/reports/...
    value: str  # as the report writes it
    context: str  # a regex: what a paragraph stating the figure says
    kind: str = DURATION  # the regex of a quantity of this kind


FIGURES = [
    Figure("the default job's wall time", "2026-12-07_multi30k_default_job_epyc_zen4.md", "1 h 10 min 5 s",
           r"for the whole\s+graph|the whole graph took"),
    Figure("the default job's artifacts on disk", "2026-12-07_multi30k_default_job_epyc_zen4.md", "1.4 GB",
           r"of artifacts|artifacts took", SIZE + r"(?= of (?:artifacts|disk))"),
    Figure("the CPU frontier study's wall time", "2026-12-02_frontier_machinery_epyc_zen4.md", "31 min 55 s",
           r"multi30k_frontier\.yaml` (?:\| a test of the IsoFLOP|is an IsoFLOP study)"),
    Figure("the smoke run's time", "2026-11-27_smoke_run_epyc_zen4.md", "2 min 38 s", r"nmt run configs/smoke\.yaml"),
]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def paragraphs() -> list[tuple[str, str]]:
    return [(page.name, text) for page in PAGES for text in page.read_text().split("\n\n")]


@pytest.mark.parametrize("figure", FIGURES, ids=[figure.name for figure in FIGURES])
def test_a_measured_figure_is_stated_as_its_report_gives_it(figure):
    report = (REPO / "benchmarks" / "reports" / figure.report).read_text()
    assert figure.value in report, f"{figure.report} does not give {figure.name} as {figure.value!r}"
    stated = [(page, found) for page, text in paragraphs() if re.search(figure.context, text)
              for found in re.findall(figure.kind, text)]
    assert stated, f"no page states {figure.name}"
    assert all(found == figure.value for _, found in stated), \
        f"{figure.name} is {figure.value} in {figure.report}; the docs say {stated}"

