"""The layers of the code, as imports: no module imports itself through others; the
core (``pipeline/core/``) imports neither the stages nor the orchestration; stages use
only the core of ``pipeline/``; and a stage, or the orchestration (the rest of
``pipeline/``), reads a stage's artifact only through that stage's public modules (its
package, ``config.py`` and the readers of ``artifact.py``), never its internals.

Imports are read from the source (every ``import`` statement, those inside functions
too), so a lazy import that would close a circle is caught as well."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import REPO
from tests.imports import imported_modules

PACKAGES = ("pipeline", "stages")
# What of pipeline/ a stage may use: its core, pipeline/core/ (config sections, what the
# runner hands a stage and its progress lines, artifacts, object stores, leases, hardware
# and its peak FLOP/s, host memory). Never the orchestration (graph, runner, commands,
# serving, tracking, Ray's console output): the rest of pipeline/.
CORE = "pipeline.core"
# What under stages/ is not a stage: stages/shared/ (models, inference, export, names,
# errors, pair files). Every stage and the orchestration may use it, and it uses no stage.
# export is not a stage of the graph: nmt export, the service and evaluate's CTranslate2
# columns call it.
SHARED = "shared"


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    graph = {name: imported_modules(path, modules.__contains__) for name, path in modules.items()}
    # Importing a.b.c runs a/__init__ and a/b/__init__ first; those edges are Python's,
    # not a design choice, so a package's own __init__ is left out of its modules' imports.
    return {name: {target for target in targets if target != name and not name.startswith(target + ".")}
            for name, targets in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def in_core(module: str) -> bool:
    return module == CORE or module.startswith(CORE + ".")


def stage_package(module: str) -> str | None:
    """``train`` for ``stages.train.loop``; None outside stages/."""
    parts = module.split(".")
    return parts[1] if parts[0] == "stages" and len(parts) > 1 else None


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others():
    assert cycles(import_graph()) == []


def test_stages_use_only_the_core_of_pipeline():
    violations = [f"{module} imports {target}" for module, targets in import_graph().items()
                  if module.startswith("stages") for target in targets
                  if target.startswith("pipeline") and not in_core(target)]
    assert violations == []


def test_a_stage_uses_another_stage_only_through_its_package_config_and_readers():
    violations = []
    for module, targets in import_graph().items():
        own = stage_package(module)
        if own is None:
            continue
        for target in targets:
            other = stage_package(target)
            if other is None or other == own or other == SHARED:
                continue
            if own == SHARED:  # shared code serves the stages and imports none
                violations.append(f"{module} (shared) imports {target}")
            elif target not in (f"stages.{other}", f"stages.{other}.config", f"stages.{other}.artifact"):
                violations.append(f"{module} imports {target}, an internal of the {other} stage")
    assert violations == []


def test_the_core_of_pipeline_imports_neither_stages_nor_orchestration():
    violations = [f"{module} imports {target}" for module, targets in import_graph().items()
                  if in_core(module) for target in targets
                  if target.startswith("stages") or (target.startswith("pipeline") and not in_core(target))]
    assert violations == []


def test_orchestration_uses_a_stage_only_through_its_package_config_and_readers():
    """graph, runner, commands, serving: a stage's artifact is read through the stage's
    public modules (its package, config.py, artifact.py); stages/shared/ (models,
    inference, export) is theirs to use whole."""
    violations = []
    for module, targets in import_graph().items():
        if not module.startswith("pipeline") or in_core(module):
            continue
        for target in targets:
            stage = stage_package(target)
            if stage is None or stage == SHARED:
                continue
            if target not in (f"stages.{stage}", f"stages.{stage}.config", f"stages.{stage}.artifact"):
                violations.append(f"{module} imports {target}, an internal of the {stage} stage")
    assert violations == []


def test_train_and_evaluate_do_not_import_each_other():
    graph = import_graph()
    crossing = [f"{module} imports {target}" for module, targets in graph.items() for target in targets
                if {stage_package(module), stage_package(target)} == {"train", "evaluate"}]
    assert crossing == []
