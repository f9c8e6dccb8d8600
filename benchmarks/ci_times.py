"""Where the time of ``.ci/run`` goes: each of its steps, and the slowest tests.

``.ci/run`` writes ``steps.tsv`` (step, seconds, exit status) and pytest's JUnit XML
into one folder (``$CI_TIMES``, default ``/tmp/nmt-ci-times``); this prints both as
tables: the steps in order with their share of the whole, then the ``--slowest``
tests with setup, call and teardown summed (a module's shared fixture is paid in the
setup of its first test).

    python benchmarks/ci_times.py /tmp/nmt-ci-times
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ElementTree
from pathlib import Path


def steps(folder: Path) -> list[tuple[str, float, str]]:
    rows = []
    for line in (folder / "steps.tsv").read_text().splitlines():
        name, seconds, status = line.split("\t")
        rows.append((name, float(seconds), status))
    return rows


def slowest_tests(folder: Path, count: int) -> tuple[list[tuple[str, float]], int, float]:
    """The ``count`` slowest tests (name, seconds), how many ran, and their total seconds."""
    report = folder / "junit.xml"
    if not report.is_file():
        return [], 0, 0.0
    cases = [(f"{case.get('classname')}::{case.get('name')}", float(case.get("time") or 0))
             for case in ElementTree.parse(report).iter("testcase")]
    cases.sort(key=lambda case: -case[1])
    return cases[:count], len(cases), sum(seconds for _, seconds in cases)


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, nargs="?", default=Path("/tmp/nmt-ci-times"))
    parser.add_argument("--slowest", type=int, default=20)
    args = parser.parse_args()

    rows = steps(args.folder)
    print("| step | min:s | exit |\n|---|---:|---:|")
    for name, seconds, status in rows:
        print(f"| {name} | {minutes(seconds)} | {status} |")
    whole = next((seconds for name, seconds, _ in rows if name == "whole"), None)
    tests, count, total = slowest_tests(args.folder, args.slowest)
    if tests:
        print(f"\n{args.slowest} slowest of {count} tests (their setup, call and teardown; all tests: "
              f"{minutes(total)})")
        print("| test | s |\n|---|---:|")
        for name, seconds in tests:
            print(f"| {name} | {seconds:.0f} |")
    if whole is not None:
        print(f"\nwhole .ci/run: {minutes(whole)}")


if __name__ == "__main__":
    main()
