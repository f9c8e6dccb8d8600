"""Fingerprints of each stage's code, against which a stage's ``VERSION`` is guarded.

An artifact's key depends on its config, its upstream keys and its stage's ``VERSION``,
never on the code itself: a stage whose code now writes another output must have its
``VERSION`` bumped, or runs would trust artifacts the old code made. This module hashes
each stage's code and compares it with ``tests/data/stage_fingerprints.json``, which
records, per stage, the hash and the ``VERSION`` it was recorded with.

A stage's code is its own package (``stages/<stage>/``) and the shared code under
``stages/`` it imports (inference, models, ...), followed through their imports; not
other stages' packages (their own keys and versions cover them) and not ``pipeline/``.
The hash is of the syntax tree, without docstrings and without the ``VERSION`` line, so
comments, docstrings and formatting never ask for a bump.

    python -m tests.stage_fingerprints            # which stages changed, what to bump
    python -m tests.stage_fingerprints --record   # record the code as it is now

Record after bumping ``VERSION``, or, where the change leaves the output as it was (a
refactoring), record without a bump and say so in the commit.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
from pathlib import Path

from tests.imports import imported_modules

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "tests" / "data" / "stage_fingerprints.json"
STAGES = ("download", "clean", "bpe", "tokenize", "tune", "train", "evaluate", "report")
# A stage that runs another stage's code, not only reads its artifact: a tuning trial
# is the train stage, so train's code is also tune's.
RUNS = {"tune": ("train",)}


def _is_stages_module(name: str) -> bool:
    return name.startswith("stages.") and module_path(name) is not None


def module_path(module: str) -> Path | None:
    """The file of ``stages.a.b``, if it is one of ours."""
    base = REPO.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def stage_modules(stage: str) -> list[str]:
    """The modules whose code makes ``stage``'s output: its package, and the shared
    modules it reaches, never another stage's package."""
    own = {f"stages.{stage}." + ".".join(path.relative_to(REPO / "stages" / stage).with_suffix("").parts)
           for path in (REPO / "stages" / stage).rglob("*.py")}
    own = {name.removesuffix(".__init__").removesuffix(".") for name in own}
    seen, queue = set(), sorted(own)
    while queue:
        module = queue.pop()
        if module in seen:
            continue
        seen.add(module)
        for target in imported_modules(module_path(module), _is_stages_module):
            other = target.split(".")[1]
            if other in STAGES and other != stage and other not in RUNS.get(stage, ()):
                continue  # an upstream stage's reader: covered by that stage's own key
            queue.append(target)
    return sorted(seen)


def code_hash(path: Path) -> str:
    """The syntax tree without docstrings and the ``VERSION = ...`` line."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [statement for statement in body
                         if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                                 and isinstance(statement.value.value, str))
                         and not (isinstance(statement, ast.Assign) and any(
                             isinstance(target, ast.Name) and target.id == "VERSION" for target in statement.targets))]
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()


def fingerprint(stage: str) -> str:
    digest = hashlib.sha256()
    for module in stage_modules(stage):
        digest.update(f"{module}:{code_hash(module_path(module))}\n".encode())
    return digest.hexdigest()[:16]


def stage_version(stage: str) -> int:
    """The ``VERSION`` a stage's package declares, read from its source (no import)."""
    tree = ast.parse((REPO / "stages" / stage / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "VERSION" for t in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError(f"stages/{stage}/__init__.py declares no VERSION")


def unbumped_changes(recorded: dict) -> list[str]:
    """One line per stage whose code changed since it was recorded while its
    ``VERSION`` stayed the same, or whose ``VERSION`` changed and was not recorded: a
    bump left unrecorded would switch the guard off for that stage, and every later
    change to it would pass unseen."""
    problems = []
    for stage in STAGES:
        entry = recorded.get(stage)
        if entry is None:
            problems.append(f"{stage}: not recorded (python -m tests.stage_fingerprints --record)")
        elif stage_version(stage) != entry["version"]:
            problems.append(f"{stage}: VERSION {stage_version(stage)} in stages/{stage}/__init__.py, but "
                            f"{entry['version']} recorded; record the new one with its code "
                            "(python -m tests.stage_fingerprints --record)")
        elif fingerprint(stage) != entry["fingerprint"]:
            problems.append(f"{stage}: its code changed since VERSION {entry['version']} was recorded; bump VERSION in "
                            f"stages/{stage}/__init__.py if its output changes, then record "
                            "(python -m tests.stage_fingerprints --record)")
    return problems


def current() -> dict:
    return {stage: {"version": stage_version(stage), "fingerprint": fingerprint(stage)} for stage in STAGES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="record every stage's code and VERSION as they are now")
    args = parser.parse_args()
    recorded = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    now = current()
    print("| stage | recorded VERSION | VERSION | code changed | modules |")
    print("|---|---:|---:|---|---:|")
    for stage in STAGES:
        old = recorded.get(stage, {})
        changed = "-" if not old else ("yes" if old["fingerprint"] != now[stage]["fingerprint"] else "no")
        print(f"| {stage} | {old.get('version', '-')} | {now[stage]['version']} | {changed} | "
              f"{len(stage_modules(stage))} |")
    if args.record:
        RECORD.write_text(json.dumps(now, indent=2) + "\n")
        print(f"recorded in {RECORD.relative_to(REPO)}")
        return 0
    problems = unbumped_changes(recorded)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
