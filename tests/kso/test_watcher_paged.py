"""kso.core.watcher.ClusterWatcher's list, page by page, against the stand-in API server: each page is parsed before
the next one is asked for (a big list is never held decoded as a whole), the state changes only once the whole list
is in, and a list that fails half-way (its continue token expired) changes nothing and is listed again."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson

from kso.core.cluster import ClusterState
from kso.core.watcher import ClusterWatcher, Reflector
from tests.support.kube_cases import wait_for
from tests.support.kube_standin import NODES, PODS, StandinApiServer, make_pod
from tests.support.standin_cases import api_client_for, seed


def observe_lists(res: Reflector, seen: Callable[[dict[str, Any]], None]) -> None:
    """Calls ``seen(kwargs)`` before each list request of ``res`` (not its watches), then makes the request."""
    list_fn = res.list_fn

    def observed(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            seen(kwargs)
        return list_fn(*args, **kwargs)

    res.list_fn = observed


def test_each_page_is_parsed_before_the_next_is_asked_for(server: StandinApiServer) -> None:
    server.add_node("n1", cpu="64", memory="256Gi")
    for i in range(23):
        server.add_pod(f"p{i:02d}", node="n1", cpu="10m", memory="1Mi")
    state = ClusterState()
    watcher = ClusterWatcher(state, api_client_for(server), page_size=5, watch_timeout_s=5)
    at_each_request: list[tuple[int, int, bool]] = []  # (pods parsed, pods in the state, synced)
    observe_lists(watcher._pods, lambda kw: at_each_request.append((len(watcher.pod_memo), len(state.pods),
                                                                    state.synced)))
    watcher.start()
    try:
        assert watcher.wait_synced(5), watcher.stats()
        assert [parsed for parsed, _, _ in at_each_request] == [0, 5, 10, 15, 20]
        assert all(in_state == 0 and not synced for _, in_state, synced in at_each_request)
        assert len(state.pods) == 23 and watcher.stats()["pods_resource_version"]
    finally:
        assert watcher.stop(5)


def test_a_list_is_never_held_decoded_as_a_whole(server: StandinApiServer) -> None:
    """Pods as the API server sends them carry far more than kso keeps (managedFields, status): the list's peak
    of Python memory stays well under what the whole list takes decoded."""
    server.add_node("n1", cpu="640", memory="2560Gi", pods="5000")
    bulk = [{"manager": f"m{i}", "operation": "Update", "fieldsV1": {f"f:{k}": {} for k in range(40)}}
            for i in range(4)]
    for i in range(1500):
        pod = make_pod(f"p{i:04d}", node="n1", cpu="10m", memory="1Mi")
        pod["metadata"]["managedFields"] = bulk
        server.add(PODS, pod)
    warm = ClusterWatcher(ClusterState(), api_client_for(server), page_size=100, watch_timeout_s=5)
    warm.start()  # the client's lazy imports and first connections, before anything is traced
    try:
        assert warm.wait_synced(20), warm.stats()
    finally:
        assert warm.stop(5)
    tracemalloc.start()
    try:
        whole = orjson.loads(orjson.dumps([server.get(PODS, f"default/p{i:04d}") for i in range(1500)]))
        decoded, _ = tracemalloc.get_traced_memory()
        del whole
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        state = ClusterState()
        watcher = ClusterWatcher(state, api_client_for(server), page_size=100, watch_timeout_s=5)
        watcher.start()
        try:
            assert watcher.wait_synced(20), watcher.stats()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            assert watcher.stop(5)
    finally:
        tracemalloc.stop()
    assert len(state.pods) == 1500
    assert peak - base < 0.5 * decoded, (peak - base, decoded)


def test_a_relist_that_fails_half_way_changes_nothing_and_lists_again(server: StandinApiServer) -> None:
    seed(server)
    for i in range(8):
        server.add_pod(f"x{i}", node="n2", cpu="10m", memory="1Mi")
    state = ClusterState()
    watcher = ClusterWatcher(state, api_client_for(server), page_size=3, watch_timeout_s=5, resync_backoff_s=0.02,
                             max_backoff_s=0.1)
    expire_next_continue = [False]
    state_at_continue: list[int] = []

    def seen(kwargs: dict[str, Any]) -> None:
        if kwargs.get("_continue") and expire_next_continue[0]:
            expire_next_continue[0] = False
            state_at_continue.append(len(state.pods))
            server.add_pod("late", node="n1", cpu="1m", memory="1Mi")
            server.compact()  # the list's snapshot is history now: its continue token gets 410 Expired

    observe_lists(watcher._pods, seen)
    watcher.start()
    try:
        assert watcher.wait_synced(5), watcher.stats()
        before = dict(state.pods)
        assert len(before) == 11  # a, b, c and x0-x7 (pending "pending" is not bound; "done" is terminal)
        expire_next_continue[0] = True
        # Both watches open (a watch still being set up would miss the cut below and stream on until its timeout).
        assert server.wait_for_watches(2)
        for resource in (NODES, PODS):  # each watch gets 410 on its next request: both resources are listed again
            server.force_gone(1, resource)
        server.drop_watches()
        assert wait_for(lambda: watcher.relists >= 1 and "late" in {p.name for p in state.pods.values()}, 5.0), (
            watcher.stats())
        assert state_at_continue == [11]  # the failed list had not touched the state
        assert {p.name for p in state.pods.values()} == {p.name for p in before.values()} | {"late"}
        assert watcher.synced
    finally:
        assert watcher.stop(5)


def test_the_listed_cache_is_frozen_out_of_the_collectors_reach_when_asked(server: StandinApiServer) -> None:
    import gc

    seed(server)
    for freeze in (False, True):
        gc.unfreeze()
        state = ClusterState()
        watcher = ClusterWatcher(state, api_client_for(server), watch_timeout_s=5, freeze_after_list=freeze)
        watcher.start()
        try:
            assert watcher.wait_synced(5), watcher.stats()
            frozen = gc.get_freeze_count()
            pods = list(state.pods.values())
            collected = {id(o) for o in gc.get_objects()}  # what a full collection walks (not the frozen)
        finally:
            assert watcher.stop(5)
            gc.unfreeze()
        assert len(pods) == 3
        if freeze:
            assert frozen > 0 and not any(id(p) in collected for p in pods)
        else:
            assert frozen == 0 and all(id(p) in collected for p in pods)
