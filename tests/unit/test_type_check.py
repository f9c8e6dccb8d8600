"""The type checker over the modules that read records by attribute (pyproject.toml,
[tool.mypy] files): they check clean, and a record field read under a name the record
does not have fails the check, before any run reaches it."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]


def _mypy(*args: str) -> tuple[str, int]:
    mypy = pytest.importorskip("mypy.api", reason="mypy is in the dev extras: pip install -e .[dev]")
    stdout, stderr, status = mypy.run(["--config-file", str(REPO / "pyproject.toml"), *args])
    return stdout + stderr, status


def test_the_record_reading_modules_type_check():
    said, status = _mypy()
    assert status == 0, said


def test_a_renamed_field_fails_the_check(tmp_path):
    reader = tmp_path / "reader.py"
    reader.write_text("from stages.report.comparison_records import PairedTest\n\n\n"
                      "def held(test: PairedTest) -> float | None:\n"
                      "    return test.p_holm_adjusted\n")
    said, status = _mypy(str(reader))
    assert status == 1 and '"PairedTest" has no attribute "p_holm_adjusted"' in said
