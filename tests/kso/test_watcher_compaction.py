"""Test 3: kso's list+watch (kso.core.watcher.ClusterWatcher) gets a real 410 Gone after an etcd compaction, lists
again and keeps answering.

This test has its own small control plane started with ``--watch-cache=false``: with the watch cache on,
kube-apiserver serves watches from its own event window, which an etcd compaction does not touch, so a
410 only comes after the window slides (minutes). Without it, a watch resumed from a compacted
resourceVersion goes to etcd and is refused at once. The watcher's server-side watch timeout is 2 s (kso's
default is 300 s) so that it resumes, from its last resourceVersion, within the test's time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from benchmarks.e2e import create_nodes, node_manifest
from kso.core.cluster import ClusterState
from kso.core.watcher import ClusterWatcher
from tests.support.fixtures import make_pod, running_extender, started_control_plane, until


@pytest.fixture(scope="module")
def uncached_plane() -> Iterator[Any]:
    with started_control_plane(apiserver_args=("--watch-cache=false",)) as cp:
        yield cp


def test_watch_expired_by_compaction_relists_and_keeps_answering(uncached_plane: Any,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    api = uncached_plane.api_client()
    core = client.CoreV1Api(api)
    create_nodes(api, [node_manifest(f"w-{i}", "4", "16Gi") for i in range(3)])
    state = ClusterState()
    watcher = ClusterWatcher(state, api, watch_timeout_s=2, resync_backoff_s=0.2)
    caplog.set_level(logging.INFO, logger="kso.core.kube")
    watcher.start()
    try:
        assert watcher.wait_synced(30), watcher.stats()
        assert watcher.stats()["relists"] == 0
        # Writes the watcher does not see (ConfigMaps), then a compaction at the newest revision: the
        # watcher's resourceVersions are now older than anything etcd can replay.
        for i in range(3):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"bump-{i}"}})
        compacted = uncached_plane.compact_etcd()
        assert int(watcher.stats()["nodes_resource_version"]) < compacted
        until(lambda: watcher.stats()["relists"] >= 2, 30, f"both resources listed again: {watcher.stats()}")
        assert "410 Gone" in caplog.text
        assert int(watcher.stats()["nodes_resource_version"]) >= compacted
        # After the re-list the watch carries on: a node added now reaches the cache, and an extender on
        # it judges that node (known, not passed unjudged).
        create_nodes(api, [node_manifest("w-late", "8", "32Gi")])
        until(lambda: "w-late" in state.node_names(), 30, "w-late in the cache")
        with running_extender([], state=state) as c:
            pod = make_pod("p")
            status, reply = c.post("/filter", {"Pod": pod, "NodeNames": ["w-late", "w-0"]})
            assert status == 200 and reply["NodeNames"] == ["w-late", "w-0"], reply
            assert c.extender.metrics.unknown_nodes._value.get() == 0  # type: ignore[attr-defined]
    finally:
        watcher.stop()
