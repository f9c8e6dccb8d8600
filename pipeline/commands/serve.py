"""``nmt serve``: a trained model behind an HTTP JSON API on Ray Serve, until stopped."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

from ray import serve

from pipeline.cluster_address import ClusterUnreachable
from pipeline.commands.console import console
from pipeline.commands.output import fail
from pipeline.commands.translate import TrainedModel, trained_artifact
from pipeline.core.context import LocalPath
from pipeline.runner import connect_ray
from pipeline.serving.app import service_app

INGRESSES = ("ray", "haproxy")
# Ray Serve's switch from its Python HTTP proxy to HAProxy; its controller reads it at start.
HAPROXY_SWITCH = "RAY_SERVE_ENABLE_HA_PROXY"
HAPROXY_DRAIN_ENVS = ("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S")


def choose_ingress(ingress: str, address: str | None) -> None:
    """Where HTTP requests come in. ``ray``: Ray Serve's HTTP proxy, a Python actor that
    parses each request and forwards it to a replica. ``haproxy``: Ray Serve's HAProxy
    ingress (Ray 2.60's feature flag), which forwards requests to the replicas in C; on a
    2-core box it served about 17% more one-sentence requests a second at 32 clients
    (benchmarks/serving/serve_load.py --ingress). Call before Ray starts: the local instance's
    Serve controller takes the switch from this process's environment."""
    if ingress not in INGRESSES:
        fail(f"--ingress {ingress}: choose {' or '.join(INGRESSES)}", 2)
    if ingress != "haproxy":
        return
    if shutil.which("haproxy") is None:
        fail("--ingress haproxy: no haproxy binary on PATH (Debian: apt-get install haproxy)", 2)
    if (address or os.environ.get("RAY_ADDRESS")) and os.environ.get(HAPROXY_SWITCH) != "1":
        fail(f"--ingress haproxy on a running cluster: start its nodes with {HAPROXY_SWITCH}=1 in their "
             "environment (ray start reads it), and set it here too", 2)
    os.environ[HAPROXY_SWITCH] = "1"
    if not (address or os.environ.get("RAY_ADDRESS")):
        # With HAProxy, a stopping replica stays reachable for this long (default 30 s)
        # so that load balancers of a cluster can deregister it; Ctrl-C on the instance
        # this command starts for itself ends the service whole, and took 33.5 s (6.5 s
        # with the Ray proxy). The local HAProxy is told of a replica set's change at
        # once. A value the user set wins.
        for name in HAPROXY_DRAIN_ENVS:
            os.environ.setdefault(name, "2")


def serve_model(model: Path, model_name: str | None, host: str, port: int, replicas: int, cpus_per_replica: float,
                gpus_per_replica: float, settings, address: str | None, artifact_root: str | None,
                overrides: list[str] = ()) -> None:
    if model.suffix in (".yaml", ".yml"):
        fetch_model, name = TrainedModel(*trained_artifact(model, model_name, artifact_root, overrides)), model_name
    else:
        if not model.exists():
            fail(f"{model}: no such model file or train artifact directory", 2)
        path = model.resolve()
        fetch_model, name = LocalPath(path), model_name or "/".join(path.parts[-2:])
    try:
        app = service_app(fetch_model, name, settings, replicas, cpus_per_replica, gpus_per_replica)
    except ValueError as error:
        fail(str(error), 2)

    try:
        connect_ray(address)
    except ClusterUnreachable as error:
        fail(str(error), 2)
    serve.start(http_options={"host": host, "port": port})
    serve.run(app, name="nmt", route_prefix="/")
    console.print(f"serving {name} ({settings.backend}, {replicas} replica(s)) at http://{host}:{port}: "
                  f"POST /translate, GET /health, /docs; Ctrl-C stops")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    # After the handlers: a script that stops the service as soon as it reads this line
    # gets the orderly shutdown, not a KeyboardInterrupt.
    print(f"ready http://{host}:{port}", flush=True)  # a line scripts and tests wait for
    failing = ReplicaStartWatch()
    while not stop.wait(STATUS_POLL_S):
        reason = failing.reason(serve.status())
        if reason:
            serve.shutdown()
            fail(reason, 1)
    serve.shutdown()


STATUS_POLL_S = 2.0
# Ray Serve retries a replica whose constructor fails for ever once the deployment has
# started (the model file deleted, a node that cannot fetch it); requests meanwhile wait
# on a replica that never comes. After this long with no healthy deployment and start
# failures reported (several retries: each takes Serve a few seconds), nmt serve stops.
START_FAILURE_WINDOW_S = 20.0


class ReplicaStartWatch:
    """Watches the service's deployment in Ray Serve's status: how long its replicas
    have been failing to start, with no healthy deployment in between."""

    def __init__(self, window_s: float = START_FAILURE_WINDOW_S, clock=time.monotonic):
        self.window_s, self.clock = window_s, clock
        self.failing_since: float | None = None

    def reason(self, status) -> str:
        """'' while the service is healthy or may still come up; else why it will not."""
        application = status.applications.get("nmt")
        deployment = next(iter(application.deployments.values()), None) if application else None
        if deployment is None:
            return ""
        state, message = str(getattr(deployment.status, "value", deployment.status)), deployment.message or ""
        if state == "HEALTHY" or "failed to start" not in message:
            self.failing_since = None
            return ""
        now = self.clock()
        if self.failing_since is None:
            self.failing_since = now
        if state == "DEPLOY_FAILED" or now - self.failing_since >= self.window_s:
            error = message.strip().splitlines()[-1]
            return (f"the service's replicas have failed to start for {now - self.failing_since:.0f} s "
                    f"(Ray Serve: {state}); stopping. Last error: {error}")
        return ""
