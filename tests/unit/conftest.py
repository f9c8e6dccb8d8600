"""Fixtures of the unit tests: they are hermetic, so the corpus is the sample checked
in under ``tests/data/multi30k`` (the first lines of Multi30k), never the copy beside
the checkout that the end-to-end tests read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import MULTI30K_SAMPLE


@pytest.fixture(scope="session")
def multi30k() -> Path:
    return MULTI30K_SAMPLE
