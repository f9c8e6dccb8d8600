"""The version guard (tests/stage_fingerprints.py): a stage whose code changed since
its fingerprint was recorded must have had its VERSION bumped, or its cached artifacts
would be trusted though the code now writes something else."""

from __future__ import annotations

import json

from tests import stage_fingerprints as guard


def test_every_stage_s_code_matches_its_recorded_version():
    assert guard.unbumped_changes(json.loads(guard.RECORD.read_text())) == []


def test_changed_code_without_a_bump_is_named_with_what_to_do():
    recorded = guard.current()
    recorded["evaluate"] = {**recorded["evaluate"], "fingerprint": "0" * 16}
    (problem,) = guard.unbumped_changes(recorded)
    assert problem.startswith("evaluate: its code changed") and "stages/evaluate/__init__.py" in problem


def test_a_bumped_version_is_accepted_once_recorded_and_until_then_named():
    """Bumped and not recorded, the guard stays on: it asks for the record, and a later
    change to the same stage cannot pass under the unrecorded bump."""
    recorded = guard.current()
    assert guard.unbumped_changes(recorded) == []
    recorded["evaluate"] = {"version": recorded["evaluate"]["version"] - 1, "fingerprint": "0" * 16}
    (problem,) = guard.unbumped_changes(recorded)
    assert problem.startswith("evaluate: VERSION") and "recorded" in problem and "--record" in problem


def test_docstrings_comments_and_the_version_line_do_not_change_the_fingerprint(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("VERSION = 1\n\ndef f(x):\n    return x + 1\n")
    documented = tmp_path / "documented.py"
    documented.write_text('"""A module."""\nVERSION = 2  # bumped\n\n\ndef f(x):\n    """Add one."""\n'
                          "    # why: ...\n    return x + 1\n")
    changed = tmp_path / "changed.py"
    changed.write_text("VERSION = 1\n\ndef f(x):\n    return x + 2\n")
    assert guard.code_hash(plain) == guard.code_hash(documented) != guard.code_hash(changed)


def test_a_stage_s_code_includes_the_shared_code_it_reaches_but_no_other_stage():
    modules = guard.stage_modules("evaluate")
    assert {"stages.evaluate", "stages.shared.inference.beam", "stages.shared.models.transformer"} <= set(modules)
    assert not [module for module in modules if module.startswith(("stages.clean", "stages.train"))]
