"""Fixtures of the stage tests."""

from __future__ import annotations

import pytest

from tests.helpers import clean_slice


@pytest.fixture(scope="package")
def cleaned(multi30k, tmp_path_factory):
    """A clean artifact of a Multi30k slice (2,000 training pairs), stages called directly."""
    return clean_slice(multi30k, tmp_path_factory.mktemp("data"), {"train": 2000, "val": 100, "test_2016_flickr": 100})
