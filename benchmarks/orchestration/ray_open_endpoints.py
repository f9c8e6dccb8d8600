"""What a Ray instance answers without its token: every TCP port its processes listen
on, and what each answers to a client that has no token.

Starts a local instance as ``nmt run`` and ``nmt serve`` do (``ray.init(address="local")``;
Ray turns token authentication on for it), or joins ``--address`` with the token in the
environment, and for each listening socket of the instance's processes asks, without
the token:

- HTTP: ``GET /metrics`` (Prometheus) and ``GET /`` with no ``Authorization`` header;
- gRPC, with no token in the metadata: the standard health check
  (``grpc.health.v1.Health/Check``), and a read-only call of each Ray service that
  listens on gRPC (``READ_ONLY_CALLS``): a port that checks tokens refuses it as
  UNAUTHENTICATED, one that does not answers OK; a port that serves none of them
  answers UNIMPLEMENTED to each.

    python -m benchmarks.orchestration.ray_open_endpoints        # from the repository root
"""

from __future__ import annotations

import argparse
import os
import socket

import grpc
import psutil
import requests

TIMEOUT_S = 3.0
# One harmless read of each of Ray's gRPC services (ray/core/generated/*_pb2_grpc.py),
# with an empty message (every field at its default).
READ_ONLY_CALLS = ("/ray.rpc.NodeInfoGcsService/GetClusterId", "/ray.rpc.NodeManagerService/GetSystemConfig",
                   "/ray.rpc.CoreWorkerService/NumPendingTasks")


def instance_processes(address: str | None) -> list[psutil.Process]:
    """The Ray processes of the instance: this driver's descendants for a local one,
    every Ray process of this machine for a joined one."""
    if address is None:
        return psutil.Process().children(recursive=True)
    return [process for process in psutil.process_iter(["name", "cmdline"])
            if any(part in " ".join(process.info["cmdline"] or []) for part in ("ray", "gcs_server", "raylet"))]


def listening(processes: list[psutil.Process]) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket, one row a port."""
    rows = {}
    for process in processes:
        try:
            name = process.name()
            if name.startswith("python") or name == "ray":  # the script it runs (dashboard.py)
                name = os.path.basename(process.cmdline()[1]) if len(process.cmdline()) > 1 else name
            connections = process.net_connections(kind="tcp")
        except psutil.Error:
            continue
        for connection in connections:
            if connection.status == psutil.CONN_LISTEN:
                rows.setdefault(connection.laddr.port, (name[:40], connection.laddr.ip, connection.laddr.port))
    return sorted(rows.values(), key=lambda row: (row[0], row[2]))


def http_status(host: str, port: int, path: str) -> str:
    try:
        return str(requests.get(f"http://{host}:{port}{path}", timeout=TIMEOUT_S).status_code)
    except requests.RequestException as error:
        return "not HTTP" if "RemoteDisconnected" in str(error) or "BadStatusLine" in str(error) else "no answer"


def grpc_status(host: str, port: int, method: str) -> str:
    """The status of a unary call with an empty message and no token."""
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        try:
            call(b"", timeout=TIMEOUT_S)
            return "OK"
        except grpc.RpcError as error:
            return error.code().name


def ray_call_status(host: str, port: int) -> str:
    """What the port answered to the one of ``READ_ONLY_CALLS`` it serves (OK or
    UNAUTHENTICATED), else what it answered to them all."""
    answers = {grpc_status(host, port, method) for method in READ_ONLY_CALLS}
    for telling in ("OK", "UNAUTHENTICATED"):
        if telling in answers:
            return telling
    return ", ".join(sorted(answers))


def reachable_address() -> str:
    """This machine's own address (not loopback), as another machine would reach it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent; picks the outgoing interface
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", help="A running cluster to join (its token in RAY_AUTH_TOKEN); "
                                          "default: start a local instance.")
    args = parser.parse_args()
    import ray

    ray.init(address=args.address or "local", include_dashboard=True, logging_level="ERROR")
    try:
        host = reachable_address()
        rows = []
        for name, bound, port in listening(instance_processes(args.address)):
            target = "127.0.0.1" if bound.startswith("127.") else host
            rows.append((name, bound, port, http_status(target, port, "/metrics"), http_status(target, port, "/"),
                         grpc_status(target, port, "/grpc.health.v1.Health/Check"),
                         ray_call_status(target, port)))
    finally:
        ray.shutdown()
    print(f"\nRay {ray.__version__}, auth mode {os.environ.get('RAY_AUTH_MODE') or 'as Ray defaults'}; "
          f"each port asked from {host} (127.0.0.1 for loopback-only ones), without the token")
    print("| process | bound to | port | GET /metrics | GET / | gRPC health check | Ray gRPC read |")
    print("|---|---|---:|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(map(str, row)) + " |")
    public = [row for row in rows if not row[1].startswith("127.")]
    print(f"\nof {len(public)} ports on a non-loopback address: "
          f"{sum(row[6] == 'UNAUTHENTICATED' for row in public)} refused Ray's calls without the token, "
          f"{sum(row[6] == 'OK' for row in public)} answered them; "
          f"{sum(row[5] == 'OK' for row in public)} answered a gRPC health check and "
          f"{sum('200' in (row[3], row[4]) for row in public)} an HTTP GET without it")

if __name__ == "__main__":
    main()
