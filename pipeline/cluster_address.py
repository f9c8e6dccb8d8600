"""Reaching a Ray cluster: an answer within seconds, or an error that says what failed
and what to do, never a hang.

Given the address of a head that is not there, ``ray.init`` retries for minutes; a
cluster whose nodes are still starting accepts a driver before its workers have joined.
``check_reachable`` asks the head's port first, ``head_client`` its GCS (which refuses
a missing or wrong token at once); ``wait_for_nodes`` waits, with a deadline, until as
many nodes as a launcher started are alive (``nmt cluster-wait``, cluster/slurm.sbatch).
A driver checks its address in a child process (``check_in_child``): the GCS client's
short connect timeouts, set here through the environment, would otherwise stay with
the driver's own connection.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Callable

TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_MODE_ENV = "RAY_AUTH_MODE"
# A port that accepts connections but is no Ray head (the dashboard's 8265, say) keeps
# the GCS client retrying for 40 s by default; with these, 4 s.
SHORT_GCS_TIMEOUTS = {"RAY_py_gcs_connect_timeout_s": "2", "RAY_gcs_rpc_server_connect_timeout_s": "1"}


class ClusterUnreachable(RuntimeError):
    """No Ray cluster answers where we were told to find one, or it is not ready in time."""


def head_host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a head's GCS address such as ``10.0.0.5:6379``; None for the
    addresses Ray resolves itself (``auto``, ``local``) and for ``ray://`` clients."""
    if address in ("auto", "local") or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ClusterUnreachable(f"Ray address {address!r} is not HOST:PORT (the head's GCS port, 6379 by default, "
                                 "as `ray start --head` prints it); check --address or RAY_ADDRESS")
    return host.strip("[]"), int(port)


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Raise ``ClusterUnreachable`` unless something accepts connections at the head's port."""
    target = head_host_port(address)
    if target is None:
        return
    host, port = target
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as error:
        raise ClusterUnreachable(
            f"no Ray head answers at {host}:{port} ({error.strerror or error}): start one there with "
            f"`ray start --head --port={port}`, or point --address / RAY_ADDRESS at the running head "
            "(`ray status` on the head prints it)") from None


def head_client(address: str):
    """A client of the head's GCS at ``address``, once it has accepted our token (or
    needs none); ``ClusterUnreachable`` at once when it refuses it. Checks the port first:
    the client alone retries a dead address for 40 s. Sets this process's GCS connect
    timeouts short (``SHORT_GCS_TIMEOUTS``): call it where no driver will join."""
    for name, value in SHORT_GCS_TIMEOUTS.items():
        os.environ.setdefault(name, value)
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    check_reachable(address)
    try:
        client = GcsClient(address=address)
        client.get_all_node_info(timeout=10)  # the first call that needs the token
        return client
    except AuthenticationError:
        if os.environ.get(TOKEN_ENV):
            hint = f"refused the token in {TOKEN_ENV}: use the token its head was started with"
        else:
            hint = (f"asks for a token: export {TOKEN_MODE_ENV}=token and {TOKEN_ENV}=<the cluster's token> (as "
                    "its head was started with) before running nmt")
        raise ClusterUnreachable(f"the Ray cluster at {address} {hint}") from None
    except Exception as error:  # noqa: BLE001 - a head that accepts connections but does not answer
        raise ClusterUnreachable(f"the Ray head at {address} accepts connections but does not answer as a Ray "
                                 f"head ({str(error).splitlines()[0] if str(error) else type(error).__name__}): "
                                 "check the port (6379 by default)") from None


def alive_nodes(client) -> int:
    """The cluster's nodes that are alive, as its head counts them."""
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    return sum(1 for node in client.get_all_node_info(timeout=10).values() if node.state == GcsNodeInfo.ALIVE)


def wait_for_nodes(address: str, nodes: int, timeout: float, count: Callable[[], int] | None = None,
                   poll_seconds: float = 2.0, report: Callable[[str], None] = print) -> int:
    """Wait until ``nodes`` nodes of the cluster at ``address`` are alive; return how many
    are. ``ClusterUnreachable`` after ``timeout`` seconds, naming how many joined, or at
    once where the head refuses our token. ``count``: how many are alive now (default:
    the head's GCS, asked without joining the cluster as a driver)."""
    deadline = time.monotonic() + timeout
    while count is None:  # the head itself may still be starting
        try:
            client = head_client(address)
            count = lambda: alive_nodes(client)  # noqa: E731
        except ClusterUnreachable as error:
            if "token" in str(error):  # waiting will not change the token
                raise
            if time.monotonic() >= deadline:
                raise ClusterUnreachable(f"no Ray cluster ready within {timeout:.0f} s: {error}") from None
            time.sleep(poll_seconds)
    last = -1
    while True:
        try:
            alive = count()
        except Exception as error:  # noqa: BLE001 - the head went away (restarting, stopped) while we waited
            if time.monotonic() >= deadline:
                raise ClusterUnreachable(f"the Ray head at {address} stopped answering: {error}") from None
            time.sleep(poll_seconds)
            continue
        if alive != last:
            report(f"{alive} of {nodes} Ray nodes alive at {address}")
            last = alive
        if alive >= nodes:
            return alive
        if time.monotonic() >= deadline:
            raise ClusterUnreachable(
                f"only {alive} of {nodes} Ray nodes joined the cluster at {address} within {timeout:.0f} s: look at "
                "the missing nodes' `ray start` output (a wrong head address, a firewall between the nodes, a "
                "different Ray version, no token) or wait longer (--timeout)")
        time.sleep(poll_seconds)


def check_in_child(address: str, timeout: float = 60.0) -> None:
    """``head_client(address)`` in a child process; its ``ClusterUnreachable`` raised here."""
    if head_host_port(address) is None:
        return
    try:
        done = subprocess.run([sys.executable, "-m", "pipeline.cluster_address", address], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ClusterUnreachable(f"the Ray head at {address} did not answer within {timeout:.0f} s") from None
    if done.returncode != 0:
        message = done.stdout.strip().splitlines()
        raise ClusterUnreachable(message[-1] if message else f"could not reach the Ray cluster at {address}: "
                                 f"{done.stderr.strip()[-500:]}")


if __name__ == "__main__":  # check_in_child's child: the message on stdout, exit 1
    try:
        head_client(sys.argv[1])
    except ClusterUnreachable as error:
        print(error)
        sys.exit(1)
