"""/readyz while the node cache goes stale, on the real control plane: etcd + kube-apiserver of this module's
own (the test freezes the API server), kso's own watcher (kso.core.watcher) feeding the node cache, and the
extender's HTTP app serving /readyz over loopback.

A partition: the API server process is stopped (SIGSTOP), so the watch's connection stays open and silent,
as behind a dropped network path, then continued (SIGCONT). Meanwhile a thread writes the node's status
every 0.3 s, as kubelets do, so that a healthy watch hears something well within the thresholds the test
sets (KSO_CACHE_STALE_S 2 s, KSO_READY_MAX_CACHE_AGE_S 6 s; the defaults are 120 s and 600 s)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from benchmarks.e2e import create_nodes, node_manifest
from kso.core.cluster import ClusterState
from kso.core.watcher import ClusterWatcher
from tests.support.fixtures import running_extender, started_control_plane, until

STALE_S, UNREADY_S = 2.0, 6.0


@pytest.fixture(scope="module")
def own_control_plane() -> Iterator[Any]:
    with started_control_plane() as cp:
        yield cp


class Kubelet:
    """Writes node n1's status annotation every ``period`` seconds until stopped (errors ignored: the API
    server may be frozen)."""

    def __init__(self, api: Any, period: float = 0.3) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api)
        self.period = period
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        beat = 0
        while not self.stop.wait(self.period):
            beat += 1
            try:
                self.core.patch_node("n1", {"metadata": {"annotations": {"heartbeat": str(beat)}}},
                                     _request_timeout=1)
            except Exception:  # noqa: BLE001,S110 - a frozen API server times the request out; the next beat retries
                pass

    def __enter__(self) -> Kubelet:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


def readyz(client: Any) -> tuple[int, dict[str, Any]]:
    status, body = client.get("/readyz")
    return status, orjson.loads(body)


def test_stale_cache_shows_in_readyz_and_the_log_and_turns_unready_only_past_its_threshold(
        own_control_plane: Any, caplog: pytest.LogCaptureFixture) -> None:
    cp = own_control_plane
    api = cp.api_client()
    create_nodes(api, [node_manifest("n1", "8", "16Gi")])
    state = ClusterState()
    watcher = ClusterWatcher(state, api, request_timeout_s=5)
    watcher.start()
    apiserver = next(c for c in cp.components if c.name == "kube-apiserver")
    env = {"KSO_CACHE_STALE_S": str(STALE_S), "KSO_READY_MAX_CACHE_AGE_S": str(UNREADY_S)}
    frozen = False
    try:
        assert watcher.wait_synced(30)
        with Kubelet(api), running_extender([], state=state, env=env) as client, \
                caplog.at_level(logging.WARNING, logger="kso.extender.http"):
            # Healthy: fresh, with its age and the thresholds in the body.
            status, body = until(lambda: (got := readyz(client))[1]["cache"]["age_s"] < STALE_S / 2 and got, 20,
                                 "a fresh cache")
            assert status == 200 and body["ready"] is True and body["cache"]["stale"] is False, body
            assert body["cache"]["stale_after_s"] == STALE_S and body["cache"]["unready_after_s"] == UNREADY_S
            assert body["cache"]["condition"].startswith("fresh: API server heard")
            # Partition: stale soon, but still ready (kube-scheduler keeps calling kso through a blip).
            os.kill(apiserver.pid, signal.SIGSTOP)
            frozen = True
            status, body = until(lambda: (got := readyz(client))[1]["cache"]["stale"] and got, 10,
                                 "the cache reported stale", interval=0.1)
            assert status == 200 and body["ready"] is True, body
            assert STALE_S <= body["cache"]["age_s"] <= UNREADY_S  # (rounded to 0.1 s)
            assert body["cache"]["condition"].startswith("stale:")
            assert any("node cache stale: nothing heard from the API server" in r.getMessage()
                       and "KSO_CACHE_STALE_S 2 s" in r.getMessage() for r in caplog.records), caplog.text
            # Past the longer threshold: unready, saying why.
            status, body = until(lambda: (got := readyz(client))[0] == 503 and got, 15,
                                 "/readyz 503 past KSO_READY_MAX_CACHE_AGE_S")
            assert body["ready"] is False and body["cache"]["age_s"] > UNREADY_S
            assert "over KSO_READY_MAX_CACHE_AGE_S 6 s" in body["reason"], body
            assert any("/readyz answers 503" in r.getMessage() for r in caplog.records), caplog.text
            # The API server back: the watch hears the kubelet's writes again; ready and fresh, and logged.
            os.kill(apiserver.pid, signal.SIGCONT)
            frozen = False
            status, body = until(lambda: (got := readyz(client))[0] == 200 and got, 60, "/readyz 200 again")
            assert body["ready"] is True and body["cache"]["stale"] is False and body["cache"]["age_s"] <= STALE_S
            assert any("node cache fresh again" in r.getMessage() for r in caplog.records), caplog.text
    finally:
        if frozen:
            os.kill(apiserver.pid, signal.SIGCONT)
        watcher.stop()


def test_snapshot_cache_is_never_stale(caplog: pytest.LogCaptureFixture) -> None:
    """A cache with no source to hear from (a snapshot, the demo) is as current as it will ever be."""
    from tests.support.fixtures import make_node, make_state

    state = make_state([make_node("n1")])
    state.last_sync -= 3600
    state.last_change -= 3600
    with running_extender([], state=state, env={"KSO_CACHE_STALE_S": "1", "KSO_READY_MAX_CACHE_AGE_S": "2"}) as client:
        status, body = readyz(client)
    assert status == 200 and body["ready"] is True and "cache" not in body, body


def test_readiness_thresholds_are_declared_settings() -> None:
    from extender.config import load_config

    config = load_config({"KSO_CACHE_STALE_S": "30", "KSO_READY_MAX_CACHE_AGE_S": "0"})
    assert config.settings.cache_stale_s == 30 and config.settings.ready_max_cache_age_s == 0
    assert load_config({}).settings.cache_stale_s == 120 and load_config({}).settings.ready_max_cache_age_s == 600


def test_quiet_healthy_watch_is_heard_through_its_bookmarks(own_control_plane: Any) -> None:
    """Nothing changes in the cluster, yet the watch stays heard: the API server sends each watch a bookmark
    about once a minute, and the cache counts it, so a quiet cluster never reaches the default 120 s
    KSO_CACHE_STALE_S. (About a minute: the API server's bookmark period.)"""
    from extender.config import load_config

    cp = own_control_plane
    api = cp.api_client()
    create_nodes(api, [node_manifest("quiet", "8", "16Gi")])
    state = ClusterState()
    watcher = ClusterWatcher(state, api)
    watcher.start()
    try:
        assert watcher.wait_synced(30)
        changes = state.version
        until(lambda: state.last_heard > state.last_sync, 90, "a watch bookmark", interval=1)
        assert state.version == changes  # heard without a change
        assert state.age_seconds() < load_config({}).settings.cache_stale_s / 2
    finally:
        watcher.stop()
