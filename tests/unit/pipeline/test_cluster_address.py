"""Reaching a Ray cluster: an error naming what failed and what to do, within seconds."""

from __future__ import annotations

import socket
import time

import pytest

from pipeline.cluster_address import ClusterUnreachable, check_reachable, head_host_port, wait_for_nodes


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once the socket closes


def test_a_dead_head_is_named_with_how_to_start_one_within_seconds():
    port = _closed_port()
    started = time.monotonic()
    with pytest.raises(ClusterUnreachable, match=f"no Ray head answers at 127.0.0.1:{port}.*ray start --head "
                                                 f"--port={port}.*RAY_ADDRESS"):
        check_reachable(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("address", ["10.0.0.5", "10.0.0.5:head", ":6379"])
def test_an_address_without_a_port_is_refused_naming_the_form(address):
    with pytest.raises(ClusterUnreachable, match="is not HOST:PORT.*--address or RAY_ADDRESS"):
        head_host_port(address)


def test_addresses_ray_resolves_itself_are_not_probed():
    assert head_host_port("auto") is None and head_host_port("ray://head:10001") is None
    assert head_host_port("[::1]:6379") == ("::1", 6379)


def test_the_wait_returns_once_the_nodes_have_joined():
    joined = iter([1, 1, 2, 3])
    lines = []
    alive = wait_for_nodes("head:6379", 3, timeout=10, count=lambda: next(joined), poll_seconds=0.01,
                           report=lines.append)
    assert alive == 3
    assert lines == [f"{n} of 3 Ray nodes alive at head:6379" for n in (1, 2, 3)]


def test_the_wait_fails_after_its_timeout_naming_how_many_joined():
    started = time.monotonic()
    with pytest.raises(ClusterUnreachable, match="only 2 of 3 Ray nodes joined the cluster at head:6379 within 1 s"
                                                 ".*ray start.*--timeout"):
        wait_for_nodes("head:6379", 3, timeout=1, count=lambda: 2, poll_seconds=0.05, report=lambda line: None)
    assert 1 <= time.monotonic() - started < 3


def test_the_wait_for_a_head_that_never_comes_up_fails_after_its_timeout():
    port = _closed_port()
    with pytest.raises(ClusterUnreachable, match=f"no Ray cluster ready within 1 s: no Ray head answers at "
                                                 f"127.0.0.1:{port}"):
        wait_for_nodes(f"127.0.0.1:{port}", 2, timeout=1, poll_seconds=0.1, report=lambda line: None)


def test_a_head_that_stops_answering_while_waited_for_is_waited_for_until_the_timeout():
    answers = iter([1, ConnectionError("GCS unavailable"), ConnectionError("GCS unavailable"), 2])

    def count():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_for_nodes("head:6379", 2, timeout=10, count=count, poll_seconds=0.01, report=lambda line: None) == 2
    with pytest.raises(ClusterUnreachable, match="the Ray head at head:6379 stopped answering: GCS unavailable"):
        wait_for_nodes("head:6379", 2, timeout=0.2, count=lambda: (_ for _ in ()).throw(ConnectionError(
            "GCS unavailable")), poll_seconds=0.05, report=lambda line: None)
