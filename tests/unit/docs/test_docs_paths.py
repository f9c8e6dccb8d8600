"""Every file of this repository the README and docs name exists (a test, a benchmark,
a report, a config, a module): a page never sends a reader to a path that moved."""

from __future__ import annotations

import re

from tests.helpers import REPO

PATH = re.compile(r"\b(?:benchmarks|cluster|configs|docs|pipeline|stages|tests)/[\w./-]*\.(?:py|md|sh|yaml|sbatch|json)\b")


def test_every_repository_path_the_docs_name_exists():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    named = {(page.name, path) for page in pages for path in PATH.findall(page.read_text())}
    missing = sorted((page, path) for page, path in named if not (REPO / path).exists())
    assert not missing, missing


def test_every_dated_report_names_the_commit_it_measured():
    """A figure the docs quote can be traced to the code that produced it."""
    commit = re.compile(r"commit\W{0,4}(?:[^.]{0,80}?)\b[0-9a-f]{7,40}\b", re.IGNORECASE)
    reports = sorted((REPO / "benchmarks" / "reports").glob("*.md"))
    unnamed = [report.name for report in reports if not commit.search(report.read_text())]
    assert reports and not unnamed, unnamed


def test_the_hand_written_pages_stay_within_their_budget():
    """What a user reads, not the project's history: the pages written by hand (the
    generated references aside) at most 1,800 lines, docs/comparing.md at most 300;
    development history and amended verdicts go to the dated reports."""
    generated = {"configuration.md", "cli.md"}
    lines = {page.name: len(page.read_text().splitlines()) for page in (REPO / "docs").glob("*.md")}
    assert sum(count for name, count in lines.items() if name not in generated) <= 1800, lines
    assert lines["comparing.md"] <= 300
