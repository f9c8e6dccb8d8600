"""nmt serve stops, with the reason, when its replicas keep failing to start (Ray Serve
alone would retry them for ever while requests wait)."""

from __future__ import annotations

from types import SimpleNamespace

from pipeline.commands.serve import ReplicaStartWatch


def status(state: str, message: str = ""):
    deployment = SimpleNamespace(status=state, message=message)
    return SimpleNamespace(applications={"nmt": SimpleNamespace(deployments={"TranslationService": deployment})})


FAILING = "A replica failed to start with exception. Retrying. Error:\nFileNotFoundError: /m/model.pt: no model file"


def test_failing_starts_stop_the_service_after_the_window_naming_the_error():
    now = [0.0]
    watch = ReplicaStartWatch(window_s=20, clock=lambda: now[0])
    assert watch.reason(status("HEALTHY")) == ""
    assert watch.reason(status("UNHEALTHY", FAILING)) == ""
    now[0] = 19
    assert watch.reason(status("UNHEALTHY", FAILING)) == ""
    now[0] = 21
    reason = watch.reason(status("UNHEALTHY", FAILING))
    assert "failed to start for 21 s" in reason and "FileNotFoundError: /m/model.pt: no model file" in reason


def test_a_healthy_status_in_between_starts_the_window_again():
    now = [0.0]
    watch = ReplicaStartWatch(window_s=20, clock=lambda: now[0])
    watch.reason(status("UNHEALTHY", FAILING))
    now[0] = 15
    assert watch.reason(status("HEALTHY")) == ""
    now[0] = 30
    assert watch.reason(status("UPDATING", FAILING)) == ""  # failing for 0 s, not 30


def test_a_failed_deployment_stops_at_once_and_an_unknown_app_waits():
    watch = ReplicaStartWatch(window_s=20, clock=lambda: 0.0)
    assert watch.reason(SimpleNamespace(applications={})) == ""
    assert "DEPLOY_FAILED" in watch.reason(status("DEPLOY_FAILED", FAILING))
