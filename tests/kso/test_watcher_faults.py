"""kso.core.watcher.ClusterWatcher against the stand-in API server, for faults the real server does not produce on
demand."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from kso.core.binder import ApiBinder
from kso.core.cluster import ClusterState
from kso.core.resources import CPU, MEMORY, MIB
from kso.core.watcher import ClusterWatcher
from tests.support.kube_standin import NODES, PODS, StandinApiServer, make_node, make_pod
from tests.support.standin_cases import (
    api_client_for,
    bind_now,
    seed,
)


def wait_for(predicate: Callable[[], bool], timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


WatcherFactory = Callable[..., tuple[ClusterWatcher, ClusterState]]


@pytest.fixture
def start_watcher(server: StandinApiServer) -> Iterator[WatcherFactory]:
    started: list[ClusterWatcher] = []

    def start(srv: StandinApiServer | None = None, sync: bool = True, **kw: Any) -> tuple[ClusterWatcher, ClusterState]:
        opts: dict[str, Any] = {
            "resync_backoff_s": 0.02,
            "max_backoff_s": 0.1,
            "watch_timeout_s": 5,
            "request_timeout_s": 2.0,
        }
        opts.update(kw)
        state = ClusterState()
        watcher = ClusterWatcher(state, api_client_for(srv or server), **opts)
        started.append(watcher)
        watcher.start()
        if sync:
            assert watcher.wait_synced(5), watcher.last_error
        return watcher, state

    yield start
    for watcher in started:
        assert watcher.stop(5), "watcher threads did not stop"


def cpu_mem(state: ClusterState, node: str) -> tuple[float, float]:
    view = state.view([node])
    return float(view.requested[0, view.columns[CPU]]), float(view.requested[0, view.columns[MEMORY]] / MIB)


def test_pod_bound_via_watch_counts_as_recent(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    watcher, state = start_watcher()
    bind_now(ApiBinder(api_client_for(server)), "default", "pending", "", "n2")
    assert wait_for(lambda: cpu_mem(state, "n2") == (3000.0, 2048.0), 1.0)
    view = state.view(["n1", "n2"])
    assert view.recent[1].tolist() == [2000.0, 1024.0]
    assert view.recent[0].tolist() == [0.0, 0.0]
    assert state.pending_pod(namespace="default", name="pending") is None  # no longer pending
    assert [p.node_name for p in state.pods.values() if p.name == "pending"] == ["n2"]


def test_stale_pending_event_does_not_undo_an_assumed_bind(
    server: StandinApiServer, start_watcher: WatcherFactory
) -> None:
    seed(server)
    watcher, state = start_watcher()
    pending = state.pending_pod(namespace="default", name="pending")
    assert pending is not None
    state.assume(pending, "n2")  # what the extender's bind verb does
    before = watcher.events
    relabelled = server.get(PODS, "default/pending")
    assert relabelled is not None
    relabelled["metadata"]["labels"] = {"x": "y"}  # an update written before the bind landed
    server.modify(PODS, relabelled)
    assert wait_for(lambda: watcher.events > before, 1.0)
    assert cpu_mem(state, "n2") == (3000.0, 2048.0)
    bind_now(ApiBinder(api_client_for(server)), "default", "pending", pending.uid, "n2")
    assert wait_for(lambda: pending.uid not in state.assumed, 1.0)  # the watch confirmed it
    assert cpu_mem(state, "n2") == (3000.0, 2048.0)
    assert state.view(["n2"]).recent[0].tolist() == [2000.0, 1024.0]  # counted once


@pytest.mark.parametrize("gone_as_http", [False, True], ids=["error-event", "http-410"])
def test_gone_relists_and_catches_up_on_the_gap(gone_as_http: bool, start_watcher: WatcherFactory) -> None:
    with StandinApiServer(gone_as_http=gone_as_http) as server:
        seed(server)
        # No relist on plain failures here: the 410 must be what triggers it.
        watcher, state = start_watcher(server, relist_after_failures=1000)
        assert server.wait_for_watches(2)
        server.partition()
        server.delete(PODS, "default/b")  # missed: it happens while kso cannot watch
        server.delete(NODES, "n2")
        server.add_node("n4", cpu="1", memory="1Gi")
        server.add_pod("e", node="n4", cpu="200m", memory="100Mi")
        server.compact()  # ... and the history covering the gap is gone
        time.sleep(0.1)
        assert state.node("n2") is not None  # the old state keeps serving meanwhile
        server.heal()
        assert wait_for(lambda: watcher.relists >= 2, 3.0), watcher.stats()  # nodes and pods
        assert sorted(state.node_names()) == ["n1", "n4"]
        assert cpu_mem(state, "n1") == (500.0, 256.0)  # b is gone
        assert cpu_mem(state, "n4") == (200.0, 100.0)
        assert {p.name for p in state.pods.values()} == {"a", "c", "e"}
        # And it keeps watching from the new list.
        server.add_pod("f", node="n1", cpu="100m", memory="1Mi")
        assert wait_for(lambda: cpu_mem(state, "n1") == (600.0, 257.0), 1.0)


def test_forced_gone_on_watch_relists(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    watcher, state = start_watcher()
    assert server.wait_for_watches(2)
    server.force_gone(2)
    server.drop_watches()
    assert wait_for(lambda: watcher.relists >= 2, 3.0), watcher.stats()
    server.add_pod("g", node="n2", cpu="1", memory="1Mi")
    assert wait_for(lambda: cpu_mem(state, "n2") == (2000.0, 1025.0), 1.0)


def test_dropped_connection_recovers_without_relist(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    watcher, state = start_watcher()
    assert server.wait_for_watches(2)
    server.drop_watches()
    server.add_pod("h", node="n1", cpu="1", memory="1Mi")
    assert wait_for(lambda: cpu_mem(state, "n1") == (1750.0, 385.0), 2.0)
    assert watcher.relists == 0  # resumed from the last resourceVersion, no need to list
    assert watcher.errors >= 1 and "ProtocolError" in watcher.last_error, watcher.last_error


def test_unreachable_server_backs_off_then_relists(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    watcher, state = start_watcher(relist_after_failures=3)
    server.partition()
    time.sleep(0.5)
    requests_during = len(server.requests)
    time.sleep(0.3)
    # Bounded: at max_backoff_s=0.1 with two threads, a few requests per 0.3 s, not a tight loop.
    assert len(server.requests) - requests_during < 30
    assert watcher.errors >= 3 and "503" in watcher.last_error
    server.delete(PODS, "default/a")
    server.heal()
    assert wait_for(lambda: cpu_mem(state, "n1") == (250.0, 128.0), 2.0)
    assert watcher.relists >= 1


def test_watch_timeout_resumes_from_last_version(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    watcher, state = start_watcher(watch_timeout_s=1)
    time.sleep(1.3)  # the first watches have ended normally by now
    server.add_pod("i", node="n2", cpu="1", memory="1Mi")
    assert wait_for(lambda: cpu_mem(state, "n2") == (2000.0, 1025.0), 1.5)
    assert watcher.relists == 0 and watcher.errors == 0
    watches = [p for _, p in server.requests if "watch=true" in p and p.startswith("/api/v1/pods")]
    assert len(watches) >= 2 and all("resourceVersion=" in p for p in watches)


def test_bookmarks_advance_resource_version(start_watcher: WatcherFactory) -> None:
    with StandinApiServer(bookmark_interval_s=0.05) as server:
        seed(server)
        watcher, _ = start_watcher(server)
        server.add_node("n9")  # moves the global resourceVersion; the pod watch only learns it by bookmark
        assert wait_for(lambda: watcher.stats()["pods_resource_version"] == str(server.resource_version), 1.0)
        watches = [p for _, p in server.requests if "watch=true" in p]
        assert all("allowWatchBookmarks=true" in p for p in watches)


def test_malformed_objects_are_skipped(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    seed(server)
    bad = make_pod("bad", node="n1")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    server.add(PODS, bad)
    bad_node = make_node("weird")
    bad_node["status"]["allocatable"]["memory"] = "-1Gi"
    server.add(NODES, bad_node)
    watcher, state = start_watcher()
    assert watcher.skipped == 2
    assert sorted(state.node_names()) == ["n1", "n2"]
    assert cpu_mem(state, "n1") == (750.0, 384.0)
    # Through the watch as well, and later events still apply.
    bad2 = make_pod("bad2", node="n2")
    bad2["spec"]["containers"] = "not a list"
    server.add(PODS, bad2)
    server.add_pod("ok", node="n2", cpu="1", memory="1Mi")
    assert wait_for(lambda: cpu_mem(state, "n2") == (2000.0, 1025.0), 1.0)
    assert watcher.skipped == 3 and watcher.errors == 0


def test_stop_is_prompt_while_watching(server: StandinApiServer) -> None:
    seed(server)
    watcher = ClusterWatcher(ClusterState(), api_client_for(server), watch_timeout_s=60, request_timeout_s=2.0)
    watcher.start()
    assert watcher.wait_synced(5)
    assert server.wait_for_watches(2)
    started = time.monotonic()
    assert watcher.stop(5)
    assert time.monotonic() - started < 3.0  # prompt: the watch itself would run 60 s


def test_stop_without_start() -> None:
    watcher = ClusterWatcher(ClusterState(), client.ApiClient())
    assert watcher.stop(1)
    assert not watcher.wait_synced(0)


def test_not_synced_while_server_down(server: StandinApiServer, start_watcher: WatcherFactory) -> None:
    server.partition()
    watcher, state = start_watcher(sync=False)
    assert not watcher.wait_synced(0.3)
    assert not state.synced and watcher.errors >= 1
    server.heal()
    assert watcher.wait_synced(2)
