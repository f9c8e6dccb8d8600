"""Reading a module's imports from its source, for the tests that check the code's
structure (``test_import_structure.py``, ``stage_fingerprints.py``)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable


def imported_modules(path: Path, is_ours: Callable[[str], bool]) -> set[str]:
    """The modules that ``path`` imports, anywhere in the file (lazy imports inside
    functions too), kept where ``is_ours(name)``. ``from a.b import c`` is ``a.b.c`` when
    that is a module of ours, else ``a.b``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and not is_ours(name):
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found
