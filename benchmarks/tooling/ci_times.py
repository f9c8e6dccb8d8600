"""Where the time of ``.ci/run`` goes: each of its steps, and the slowest tests.

``.ci/run`` writes ``steps.tsv`` (step, seconds, exit status) and pytest's JUnit XML
into one folder (``$CI_TIMES``, else a new one it names); this prints both as
tables: the steps in order, the test modules by their seconds (setup, call and
teardown summed; a module's shared fixture is paid in the setup of its first test),
then the ``--slowest`` tests. With ``--before FOLDER`` (an earlier run's), each table
puts that run's figures beside this one's.

    python benchmarks/tooling/ci_times.py "$CI_TIMES" --before /path/to/an/earlier/run
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


def test_seconds(folder: Path) -> dict[str, float]:
    """Each test's seconds ("module::name"), from pytest's JUnit XML; empty without one."""
    report = folder / "junit.xml"
    if not report.is_file():
        return {}
    return {f"{case.get('classname')}::{case.get('name')}": float(case.get("time") or 0)
            for case in ElementTree.parse(report).iter("testcase")}


def by_module(tests: dict[str, float]) -> dict[str, tuple[int, float]]:
    """(tests, seconds) of each test module."""
    modules: dict[str, tuple[int, float]] = {}
    for name, seconds in tests.items():
        count, total = modules.get(name.split("::")[0], (0, 0.0))
        modules[name.split("::")[0]] = (count + 1, total + seconds)
    return modules


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a run's $CI_TIMES (.ci/run prints it)")
    parser.add_argument("--before", type=Path, help="an earlier run's folder, shown beside this one")
    parser.add_argument("--slowest", type=int, default=20)
    parser.add_argument("--modules", type=int, default=40, help="how many modules, slowest first")
    args = parser.parse_args()
    before_steps = dict((name, seconds) for name, seconds, _ in steps(args.before)) if args.before else {}
    before_tests = test_seconds(args.before) if args.before else {}
    then = " before |" if args.before else ""
    gap = "---:|" if args.before else ""

    def earlier(seconds: float | None, shown=minutes) -> str:
        if not args.before:
            return ""
        return f" {shown(seconds)} |" if seconds is not None else " - |"

    rows = steps(args.folder)
    print(f"| step | min:s | exit |{then}\n|---|---:|---:|{gap}")
    for name, seconds, status in rows:
        print(f"| {name} | {minutes(seconds)} | {status} |{earlier(before_steps.get(name))}")

    tests = test_seconds(args.folder)
    if not tests:
        return
    modules, modules_before = by_module(tests), by_module(before_tests)
    total = sum(tests.values())
    print(f"\n{len(tests)} tests in {len(modules)} modules, {minutes(total)} of test time"
          + (f" ({len(before_tests)} tests, {minutes(sum(before_tests.values()))} before)" if args.before else ""))
    print(f"| module | tests | s |{' tests before | s before |' if args.before else ''}\n"
          f"|---|---:|---:|{'---:|---:|' if args.before else ''}")
    shown = sorted(set(modules) | set(modules_before), key=lambda m: -max(modules.get(m, (0, 0))[1],
                                                                           modules_before.get(m, (0, 0))[1]))
    for module in shown[:args.modules]:
        count, seconds = modules.get(module, (0, 0.0))
        line = f"| {module} | {count} | {seconds:.0f} |"
        if args.before:
            old_count, old_seconds = modules_before.get(module, (0, 0.0))
            line += f" {old_count} | {old_seconds:.0f} |"
        print(line)

    print(f"\n{args.slowest} slowest tests (their setup, call and teardown)")
    print(f"| test | s |{then}\n|---|---:|{gap}")
    for name, seconds in sorted(tests.items(), key=lambda test: -test[1])[:args.slowest]:
        print(f"| {name} | {seconds:.0f} |{earlier(before_tests.get(name), lambda s: f'{s:.0f}')}")
    whole = next((seconds for name, seconds, _ in rows if name == "whole"), None)
    if whole is not None:
        print(f"\nwhole .ci/run: {minutes(whole)}")


if __name__ == "__main__":
    main()
