"""``kso shadow`` on the real control plane (etcd + kube-apiserver) and a real Prometheus backfilled (promtool) with
node-exporter-shaped series for two nodes: ``sh-hot`` runs at 86 % cpu, then at 97 % from minutes before the test on
(with OOM kills), ``sh-cool`` at 20 %. Pods are bound with the Binding API, as another scheduler would; the shadow
judges each bind on its cache as it was before it and reads both nodes' outcomes from Prometheus once the horizon has
passed."""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from kubernetes import client

from benchmarks.e2e import create_nodes, delete_nodes, node_manifest, pod_manifest
from benchmarks.sim.history_openmetrics import backfill
from kso.core.net import free_port
from shadow.run import RunningShadow, start
from tests.support.fixtures import make_running, until
from tests.support.prom_server import PromServer, prometheus_binaries

HOT, COOL = "sh-hot", "sh-cool"
SCRAPE = 60
BEFORE_S, AFTER_S = 6 * 3600, 1800
CPUS = 4
HOT_BEFORE, HOT_AFTER, COOL_UTIL = 0.86, 0.97, 0.20
HORIZON_S = 300
SWITCH_S = 600
SETTLE_S = 60.0
USAGE_NS, USAGE_CORES, USAGE_MIB = "sh-usage", 0.1, 100.0


def node_exporter_lines(now: float) -> list[str]:
    """OpenMetrics text of node-exporter's series for HOT and COOL from now - BEFORE_S to now + AFTER_S, one scrape a
    minute: cpu counters rising by each interval's utilisation (small deterministic noise), memory at 50 %,
    node_uname_info, and HOT's OOM-kill counter rising by one a minute. HOT's load rises SWITCH_S before now, so
    that the 5-minute rate has reached it when the test's pods are bound."""
    end = math.floor(now / SCRAPE) * SCRAPE + AFTER_S
    scrapes = np.arange(end - BEFORE_S - AFTER_S, end + 1, SCRAPE, dtype=float)
    rng = np.random.default_rng(7)
    fam: dict[str, list[str]] = {k: [] for k in ("node_cpu_seconds", "node_memory_MemAvailable_bytes",
                                                 "node_memory_MemTotal_bytes", "node_uname_info", "node_vmstat_oom_kill")}
    for i, (node, before, after) in enumerate(((HOT, HOT_BEFORE, HOT_AFTER), (COOL, COOL_UTIL, COOL_UTIL))):
        util = np.clip(np.where(scrapes > now - SWITCH_S, after, before) + rng.normal(0, 0.01, len(scrapes)), 0, 1)
        busy, idle = np.cumsum(util * SCRAPE) + 1e5, np.cumsum((1 - util) * SCRAPE) + 1e5
        base = f'instance="10.9.0.{i + 1}:9100",job="node-exporter"'
        for cpu in range(CPUS):
            for mode, counter in (("idle", idle), ("user", busy)):
                fam["node_cpu_seconds"] += [f'node_cpu_seconds_total{{cpu="{cpu}",{base},mode="{mode}"}} {v:.3f} {t:.0f}'
                                            for v, t in zip(counter, scrapes, strict=True)]
        total = 16 * 2.0**30
        fam["node_memory_MemTotal_bytes"] += [f"node_memory_MemTotal_bytes{{{base}}} {total:.0f} {t:.0f}" for t in scrapes]
        fam["node_memory_MemAvailable_bytes"] += [f"node_memory_MemAvailable_bytes{{{base}}} {total / 2:.0f} {t:.0f}"
                                                  for t in scrapes]
        fam["node_uname_info"] += [f'node_uname_info{{{base},nodename="{node}"}} 1 {t:.0f}' for t in scrapes]
        kills = np.cumsum(scrapes > now - SWITCH_S) if node == HOT else np.zeros(len(scrapes))
        fam["node_vmstat_oom_kill"] += [f"node_vmstat_oom_kill{{{base}}} {k:.0f} {t:.0f}"
                                        for k, t in zip(kills, scrapes, strict=True)]
    # cAdvisor's series of one pod (USAGE_NS/user, on HOT): USAGE_CORES of cpu, USAGE_MIB of memory
    pod_labels = f'container="c",image="x",namespace="{USAGE_NS}",pod="user"'
    fam["container_cpu_usage_seconds"] = [f"container_cpu_usage_seconds_total{{{pod_labels}}} {v:.3f} {t:.0f}"
                                          for v, t in zip(np.cumsum(np.full(len(scrapes), USAGE_CORES * SCRAPE)),
                                                          scrapes, strict=True)]
    fam["container_memory_working_set_bytes"] = [f"container_memory_working_set_bytes{{{pod_labels}}} "
                                                 f"{USAGE_MIB * 2**20:.0f} {t:.0f}" for t in scrapes]
    out = []
    for name, lines in fam.items():
        out.append(f"# TYPE {name} {'counter' if name.endswith('_seconds') else 'gauge'}\n")
        out += [line + "\n" for line in lines]
    return [*out, "# EOF\n"]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    bins = prometheus_binaries()
    assert bins is not None, "prometheus/promtool not installed (apt-get install -y prometheus)"
    workdir = tmp_path_factory.mktemp("shadow-prometheus")
    om = workdir / "nodes.om"
    om.write_text("".join(node_exporter_lines(time.time())))
    backfill(om, workdir / "tsdb", bins[1])
    server = PromServer(bins[0], workdir, np.zeros(0), {}, np.zeros(0), np.zeros(0),
                        provenance="node-exporter series generated for the shadow's two nodes")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def two_nodes(control_plane: Any, kube_namespace: str) -> Iterator[str]:
    """HOT and COOL, labelled for this test's pods (the shared control plane holds other tests' nodes, which the
    pods' nodeSelector keeps out of kso's choice); the label value is returned."""
    api = control_plane.api_client()
    label = {"shadow-test": kube_namespace}
    create_nodes(api, [node_manifest(HOT, str(CPUS), "16Gi", labels=label),
                       node_manifest(COOL, str(CPUS), "16Gi", labels=label)])
    yield kube_namespace
    core = client.CoreV1Api(api)
    for name in (HOT, COOL):
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    delete_nodes(api, [HOT, COOL])


def env_for(url: str, report: Path) -> dict[str, str]:
    return {"KSO_PROMETHEUS_URL": url, "KSO_PROMETHEUS_HISTORY": str(BEFORE_S), "KSO_FORECAST_HORIZON": str(HORIZON_S),
            "KSO_SHADOW_ADDRESS": "127.0.0.1:0", "KSO_SHADOW_REPORT": str(report), "KSO_PROMETHEUS_TIMEOUT": "3",
            "KSO_PROMETHEUS_RETRIES": "0"}


def started(control_plane: Any, env: dict[str, str]) -> RunningShadow:
    # outcomes read by the test itself (check_outcomes), not every scrape interval behind its back
    running = start(env, api_client=control_plane.api_client(), sync_timeout_s=30, check_every_s=3600.0)
    assert running.watcher.synced
    return running


def pod(core: client.CoreV1Api, ns: str, name: str, label: str, node: str = "", cpu: str = "500m") -> None:
    manifest = pod_manifest(name, cpu=cpu, memory="256Mi", scheduler="default-scheduler",
                            node_selector={"shadow-test": label})
    if node:
        manifest["spec"]["nodeName"] = node
    core.create_namespaced_pod(ns, manifest)


def metric(text: str, line_start: str) -> float:
    found = [ln for ln in text.splitlines() if ln.startswith(line_start)]
    assert len(found) == 1, (line_start, [ln for ln in text.splitlines() if ln.startswith("kso_shadow")])
    return float(found[0].rsplit(" ", 1)[1])


def test_kso_warns_about_the_node_that_goes_over_and_picks_the_one_that_does_not(
        control_plane: Any, kube_namespace: str, two_nodes: str, prometheus: PromServer, tmp_path: Path) -> None:
    core = client.CoreV1Api(control_plane.api_client())
    ns = kube_namespace
    report = tmp_path / "shadow-report.md"
    running = started(control_plane, env_for(prometheus.url, report))
    try:
        shadow = running.shadow
        status = shadow.engine.forecast_status
        until(lambda: status.last_success is not None, 60, f"a forecast refresh ({status.last_error})")
        pod(core, ns, "web", two_nodes, cpu="2500m")  # more than half a node: it fits HOT only while not counted there
        pod(core, ns, "api", two_nodes)
        pod(core, ns, "pinned", two_nodes, node=HOT)  # created on its node: no scheduler bound it
        until(lambda: running.shadow.state.pending_pod(namespace=ns, name="api"), 10, "the pods seen pending")
        make_running(core, ns, "web", HOT)  # the other scheduler's choice: the node kso forecasts over U*
        assert shadow.wait_judged(1, 30)
        make_running(core, ns, "api", COOL)  # ... and the node kso put web on, in its own schedule
        assert shadow.wait_judged(2, 30)
        time.sleep(1)
        records = {r.pod.split("/")[1]: r for r in shadow.pending}
        assert set(records) == {"web", "api"}, records  # the pod created on its node is not a bind
        web, api = records["web"], records["api"]
        assert (web.chosen, web.pick, web.warned) == (HOT, COOL, True)
        assert any(r.startswith("safe-overload") for r in web.reasons), web.reasons
        assert web.chosen_risk is not None and web.chosen_risk > 0.3 > (web.pick_risk or 0.0)
        # judged on the cache before the bind: web's 2500m not counted on HOT yet (else "Insufficient cpu" there)
        assert web.fitting == 2 and web.passing == 1 and not web.late and web.nodes >= 2
        # kso's picks add up: in its schedule web (2.5 of COOL's 4 cpus, a recent bind at its requests) is on COOL,
        # which api would take over U*; HOT is refused, so kso would have held api. Its verdict on the chosen node is
        # on the real cache, where COOL holds api easily: not warned.
        assert (api.chosen, api.pick, api.warned, api.reasons, api.kind) == (COOL, None, False, [], "safety")
        node = shadow.counterfactual.nodes[COOL]
        assert (node.picked, node.moved_in, node.live_in, node.moved_out) == (1, 1, 1, 1)
        assert node.requested[0] == pytest.approx(2500) and node.real_requested[0] == pytest.approx(0)
        assert shadow.counterfactual.delta[HOT]["cpu"] == pytest.approx(-2500)

        assert shadow.settings.settle_s == SETTLE_S  # one scrape interval (KSO_PROMETHEUS_SCRAPE_INTERVAL's default)
        assert shadow.check_outcomes() == 0  # the horizon has not passed
        assert shadow.check_outcomes(now=web.at + HORIZON_S + 1) == 0  # nor the settling time after it
        assert shadow.check_outcomes(now=web.at + HORIZON_S + SETTLE_S + 1) == 2
        hot, cool = web.chosen_outcome, web.pick_outcome
        assert hot is not None and cool is not None and api.pick_outcome is None  # held: no node of kso's
        assert hot.peak_cpu == pytest.approx(HOT_AFTER, abs=0.05) and hot.over(0.9)
        assert hot.peak_memory == pytest.approx(0.5, abs=1e-6)
        assert hot.oom_kills is not None and hot.oom_kills >= 1
        assert cool.peak_cpu == pytest.approx(COOL_UTIL, abs=0.05) and hot.pod_share is None
        assert cool.pod_share == pytest.approx((2500 / 4000, 256 / (16 * 1024)))  # web's requests, where it did not run
        assert cool.with_pod == pytest.approx(cool.peak_cpu + 2500 / 4000) and cool.over(0.9) is False
        assert cool.oom_kills == 0
        assert hot.throttled is None and "throttled" in shadow.outcomes.missing  # no cAdvisor series here

        text = requests.get(f"http://127.0.0.1:{running.port}/metrics", timeout=5).text
        assert metric(text, 'kso_shadow_decisions_total{decision="changed"}') == 1
        assert metric(text, 'kso_shadow_decisions_total{decision="held"}') == 1
        assert metric(text, 'kso_shadow_changes_total{why="safety"}') == 2  # web refused HOT; api held
        assert metric(text, 'kso_shadow_changes_total{why="score"}') == 0
        assert metric(text, "kso_shadow_warned_total") == 1
        assert metric(text, 'kso_shadow_outcomes_total{result="over",role="chosen",warned="true"}') == 1
        assert metric(text, 'kso_shadow_outcomes_total{result="under",role="chosen",warned="false"}') == 1
        assert metric(text, 'kso_shadow_outcomes_total{result="under",role="kso_pick",warned="true"}') == 1
        # HOT's kills in the two binds' windows (the same minutes): counted once, not once per bind
        assert metric(text, 'kso_shadow_oom_kills_total{role="chosen"}') == hot.oom_kills
        assert api.chosen_outcome is not None and api.chosen_outcome.oom_new in (0, None)
        assert metric(text, "kso_shadow_pending_records") == 0
        assert metric(text, "kso_shadow_skipped_share") == 0
    finally:
        final = running.close()
    assert report.read_text() == final
    assert "| **kso would have refused the chosen node (a safety difference)** | 1 of 2 (50 %): 1 placed elsewhere, 0 left " \
           "pending |" in final
    assert "| kso would have placed the pod elsewhere on score alone (it accepted the chosen node) | 0 of 2 (0 %) |" in final
    assert "| kso would have left the pod pending (no node passes) | 1 of 2 (50 %) |" in final
    assert "| **warned nodes that went over U\\* (90%)** | 1 of 1 (100 %) |" in final
    assert "picks that went over U\\*** (in its schedule: with the pods it put there at their requests; same node " \
           "included) | 0 of 1 (0 %) |" in final
    assert "| nodes whose requests passed their allocatable in kso's schedule | 0 of 2 it put pods on or took pods " \
           "from |" in final
    schedule = next(ln for ln in final.splitlines() if ln.startswith(f"| {COOL} |"))
    assert schedule.startswith(f"| {COOL} | 1 (1 / 1) | 1 | 62% / 2% | 0% / 0% | 62% |"), schedule
    if importlib.util.find_spec("matplotlib") is not None:  # the plot: a point per node read, beside the report
        assert (tmp_path / "shadow-report.png").stat().st_size > 0 and "](shadow-report.png)" in final
    row = next(ln for ln in final.splitlines() if f"{ns}/web" in ln)
    assert f"| {HOT} |" in row and f"| {COOL} |" in row and "> U*" in row and "safe-overload" in row


def test_kso_s_pick_is_read_with_the_pod_s_measured_usage_where_known(
        control_plane: Any, two_nodes: str, prometheus: PromServer, tmp_path: Path) -> None:
    """A pod requesting 2 cpus that used 0.1 (cAdvisor) ran on HOT; kso would have put it on COOL. COOL is read with
    what the pod used, not what it requested: the estimate of what kso's schedule would have measured there."""
    core = client.CoreV1Api(control_plane.api_client())
    core.create_namespace({"metadata": {"name": USAGE_NS}})
    records_file = tmp_path / "records.jsonl"
    running = started(control_plane, {**env_for(prometheus.url, tmp_path / "report.md"),
                                      "KSO_SHADOW_RECORDS": str(records_file)})
    try:
        shadow = running.shadow
        status = shadow.engine.forecast_status
        until(lambda: status.last_success is not None, 60, f"a forecast refresh ({status.last_error})")
        pod(core, USAGE_NS, "user", two_nodes, cpu="2000m")
        until(lambda: shadow.state.pending_pod(namespace=USAGE_NS, name="user"), 10, "the pod seen pending")
        make_running(core, USAGE_NS, "user", HOT)
        assert shadow.wait_judged(1, 30)
        [record] = shadow.pending
        assert (record.chosen, record.pick, record.pick_alloc) == (HOT, COOL, (4000.0, 16384.0))
        assert record.pick_share == pytest.approx((2000 / 4000, 256 / 16384))  # at its requests, at the bind
        assert shadow.check_outcomes(now=record.at + HORIZON_S + SETTLE_S + 1) == 1
        assert record.pod_usage == pytest.approx((USAGE_CORES * 1000, USAGE_MIB), rel=0.02)
        o = record.pick_outcome
        assert o is not None and o.pod_measured
        assert o.pod_share == pytest.approx((USAGE_CORES * 1000 / 4000, USAGE_MIB / 16384), rel=0.02)
        assert o.with_pod == pytest.approx(max(o.peak_cpu + 0.025, o.peak_memory + USAGE_MIB / 16384), abs=0.002)
    finally:
        running.close()
        core.delete_namespace(USAGE_NS)
    [line] = [json.loads(x) for x in records_file.read_text().splitlines()]
    assert line["usage"]["cpu_m"] == pytest.approx(100, rel=0.02) and line["outcomes"]["kso_pick"]["pod_measured"]


BURST = 12


def test_a_burst_of_picks_adds_up_in_kso_s_schedule_and_each_kill_counts_once(
        control_plane: Any, kube_namespace: str, two_nodes: str, prometheus: PromServer, tmp_path: Path) -> None:
    """The other scheduler binds BURST pods of 500m to HOT, one after another. Judged one at a time on the real cache
    (which never receives kso's picks) every pick would be COOL: 6 cpus of requests on a 4-cpu node. In kso's schedule
    each pick counts: COOL fills up (kso's forecast with the recent binds at their requests, then its allocatable)
    and kso holds the rest. HOT's OOM kills, in every bind's window, are counted once. Two of the pods kso moved
    are deleted: off kso's schedule too. Every judged bind is one JSON line of --records."""
    core = client.CoreV1Api(control_plane.api_client())
    ns = kube_namespace
    records_file = tmp_path / "records.jsonl"
    running = started(control_plane, {**env_for(prometheus.url, tmp_path / "report.md"),
                                      "KSO_SHADOW_RECORDS": str(records_file)})
    try:
        shadow = running.shadow
        status = shadow.engine.forecast_status
        until(lambda: status.last_success is not None, 60, f"a forecast refresh ({status.last_error})")
        for i in range(BURST):
            pod(core, ns, f"b{i}", two_nodes)
        until(lambda: shadow.state.pending_pod(namespace=ns, name=f"b{BURST - 1}"), 10, "the pods seen pending")
        for i in range(BURST):
            make_running(core, ns, f"b{i}", HOT)
        assert shadow.wait_judged(BURST, 60)
        records = list(shadow.pending)
        picks = [r.pick for r in records]
        moved = picks.count(COOL)
        assert all(r.chosen == HOT and r.warned for r in records), [(r.chosen, r.reasons) for r in records]
        assert set(picks) <= {COOL, None} and 1 <= moved < BURST and picks == [COOL] * moved + [None] * (BURST - moved)
        cf = shadow.counterfactual
        assert not cf.over_alloc and cf.nodes[COOL].peak_share <= 1.0  # no node's requests past its allocatable
        assert cf.nodes[COOL].requested[0] == pytest.approx(500 * moved) and cf.nodes[COOL].live_in == moved
        assert cf.nodes[HOT].moved_out == BURST
        # each pick's outcome counts the pods kso put on COOL before it, at their requests
        assert [r.pick_share[0] for r in records[:moved]] == pytest.approx([500 * (k + 1) / 4000 for k in range(moved)])

        assert shadow.check_outcomes(now=records[-1].at + HORIZON_S + SETTLE_S + 1) == BURST
        kills = [r.chosen_outcome.oom_kills for r in records if r.chosen_outcome is not None]
        new = [r.chosen_outcome.oom_new or 0 for r in records if r.chosen_outcome is not None]
        span = records[-1].at + HORIZON_S - records[0].at
        assert len(kills) == BURST and min(kills) >= 1  # a kill a minute on HOT, in every window
        assert sum(new) <= span / SCRAPE + 1 < sum(kills)  # once per kill: the windows' union, not their sum
        assert shadow.tally.oom["chosen"] == sum(new)

        core.delete_namespaced_pod("b0", ns, grace_period_seconds=0)
        core.delete_namespaced_pod("b1", ns, grace_period_seconds=0)
        until(lambda: cf.seq >= 2, 10, "the deletions seen")
        pod(core, ns, "late", two_nodes)
        until(lambda: shadow.state.pending_pod(namespace=ns, name="late"), 10, "the pod seen pending")
        make_running(core, ns, "late", HOT)
        assert shadow.wait_judged(BURST + 1, 30)
        assert cf.nodes[COOL].live_in == moved - 2 + (shadow.pending[-1].pick == COOL)
        assert "b0" not in {p.uid for p in cf.placed.values()}
    finally:
        running.close()
    lines = [json.loads(line) for line in records_file.read_text().splitlines()]
    assert len(lines) == BURST + 1 and [x["status"] for x in lines] == ["read"] * BURST + ["pending"]
    first = lines[0]
    assert (first["pod"], first["chosen"], first["kso_pick"], first["kind"], first["warned"]) == \
        (f"{ns}/b0", HOT, COOL, "safety", True)
    assert first["requests"] == {"cpu_m": 500.0, "memory_mb": 256.0} and first["reasons"][0].startswith("safe-overload")
    assert first["chosen_risk"] > 0.3 and first["outcomes"]["chosen"]["over_u_star"] is True
    assert first["outcomes"]["kso_pick"]["kso_extra_share"][0] == pytest.approx(500 / 4000)
    assert first["missed"] is False and lines[-1]["outcomes"] == {"chosen": None, "kso_pick": None}


def test_a_chosen_node_missing_from_kso_s_cache_is_its_own_outcome_not_a_warning(
        control_plane: Any, kube_namespace: str, two_nodes: str, prometheus: PromServer, tmp_path: Path) -> None:
    """A pod bound to a node kso's node cache does not hold (here one the API server has no Node object of: the
    Binding API does not ask): kso cannot judge that node, so it neither warned about it nor accepted it. Counted
    apart, in the metrics and the report, and its outcome too."""
    core = client.CoreV1Api(control_plane.api_client())
    ns = kube_namespace
    report = tmp_path / "shadow-report.md"
    running = started(control_plane, env_for(prometheus.url, report))
    gone = f"sh-gone-{ns}"
    try:
        shadow = running.shadow
        status = shadow.engine.forecast_status
        until(lambda: status.last_success is not None, 60, f"a forecast refresh ({status.last_error})")
        pod(core, ns, "ghost", two_nodes)
        until(lambda: shadow.state.pending_pod(namespace=ns, name="ghost"), 10, "the pod seen pending")
        make_running(core, ns, "ghost", gone)
        assert shadow.wait_judged(1, 30)
        [record] = shadow.pending
        assert (record.chosen, record.unknown_node, record.warned, record.reasons) == (gone, True, False, [])
        assert record.pick == COOL and record.chosen_risk is None and record.chosen_score is None
        assert shadow.check_outcomes(now=record.at + HORIZON_S + SETTLE_S + 1) == 1
        assert record.chosen_outcome is not None and record.chosen_outcome.peak is None  # no series of that node

        text = requests.get(f"http://127.0.0.1:{running.port}/metrics", timeout=5).text
        assert metric(text, "kso_shadow_unknown_node_total") == 1
        assert metric(text, "kso_shadow_warned_total") == 0
        assert metric(text, 'kso_shadow_decisions_total{decision="changed"}') == 1
        assert metric(text, 'kso_shadow_outcomes_total{result="no_data",role="chosen",warned="unknown_node"}') == 1
        assert metric(text, 'kso_shadow_outcomes_total{result="under",role="kso_pick",warned="unknown_node"}') == 1
        assert 'role="chosen",warned="false"' not in text and 'role="chosen",warned="true"' not in text
    finally:
        final = running.close()
    assert "| **kso would have refused the chosen node (a safety difference)** | 0 of 1 (0 %): 0 placed elsewhere, 0 " \
           "left pending |" in final
    assert "| kso would have placed the pod elsewhere on score alone (it accepted the chosen node) | 0 of 1 (0 %) |" in final
    assert "| the chosen node was not in kso's node cache (not judged) | 1 of 1 (100 %); 1 of them placed elsewhere |" \
        in final
    assert "| chosen nodes kso did not warn about that went over U\\* | 0 of 0 |" in final
    row = next(ln for ln in final.splitlines() if f"{ns}/ghost" in ln)
    assert f"| {gone} |" in row and "not judged: not in kso's node cache" in row


def test_a_prometheus_outage_is_logged_and_the_binds_wait_for_it(
        control_plane: Any, kube_namespace: str, two_nodes: str, prometheus: PromServer, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    core = client.CoreV1Api(control_plane.api_client())
    ns = kube_namespace
    running = started(control_plane, {**env_for(prometheus.url, tmp_path / "report.md"), "KSO_FORECAST_REFRESH": "2"})
    try:
        shadow = running.shadow
        status = shadow.engine.forecast_status
        until(lambda: status.last_success, 60, "the first forecast refresh")
        prometheus.stop()  # Prometheus answered at the start (else kso shadow does not start) and dies now
        until(lambda: status.last_error, 30, "the forecasts' refresh failing")
        assert prometheus.url in status.last_error
        pod(core, ns, "web", two_nodes)
        until(lambda: shadow.state.pending_pod(namespace=ns, name="web"), 10, "the pod seen pending")
        make_running(core, ns, "web", HOT)
        assert shadow.wait_judged(1, 30)  # judged on the last forecasts, still fresh
        record = shadow.pending[0]
        assert record.chosen == HOT
        with caplog.at_level(logging.WARNING, logger="kso.shadow"):
            assert shadow.check_outcomes(now=record.at + HORIZON_S + SETTLE_S + 1) == 0
            assert shadow.check_outcomes(now=record.at + HORIZON_S + SETTLE_S + 2) == 0
        down = [r.getMessage() for r in caplog.records if "outcomes not read" in r.getMessage()]
        assert len(down) == 1 and prometheus.url in down[0] and "1 binds wait" in down[0], down  # once per outage
        assert list(shadow.pending) == [record] and record.chosen_outcome is None
        text = requests.get(f"http://127.0.0.1:{running.port}/metrics", timeout=5).text
        assert metric(text, "kso_shadow_prometheus_errors_total") == 2
        # the forecasts' health, as kso extender's /metrics has it: refreshes failed by reason, nodes by load data
        assert metric(text, 'kso_forecast_refresh_failures_total{reason="unreachable"}') >= 1
        assert metric(text, "kso_forecast_consecutive_failures") >= 1
        assert metric(text, 'kso_forecast_nodes{source="forecast"}') >= 2  # HOT and COOL: the last forecasts
        report = shadow.report()
        assert "Prometheus | unavailable since" not in report and "- Prometheus: unavailable since" in report
        assert f"load statistics: forecasts from {prometheus.url}: forecasts for " in report, report
        assert "- forecast refreshes failed: " in report and " unreachable" in report, report

        prometheus.start()
        with caplog.at_level(logging.WARNING, logger="kso.shadow"):
            assert shadow.check_outcomes(now=record.at + HORIZON_S + SETTLE_S + 3) == 1
        assert any("outcomes read again" in r.getMessage() for r in caplog.records)
        assert record.chosen_outcome is not None and record.chosen_outcome.over(0.9)
    finally:
        if prometheus.proc is None:
            prometheus.start()
        running.close()


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["--address", "127.0.0.1:http"], 1, "kso shadow: --address / KSO_SHADOW_ADDRESS '127.0.0.1:http' is not host:port"),
    (["--duration", "-5"], 2, "kso shadow: --duration -5 is negative"),
])
def test_bad_input_is_one_line_and_an_exit_code(argv: list[str], code: int, message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from kso.cli import main as kso_main

    assert kso_main(["shadow", *argv]) == code
    err = capsys.readouterr().err
    assert err.strip() == message, err


def test_an_api_server_outage_is_the_watch_s_and_a_bind_in_the_gap_is_judged_late(
        caplog: pytest.LogCaptureFixture, tmp_path: Path, prometheus: PromServer) -> None:
    """The stand-in API server (tests/support/kube_standin.py: the real server does not go away on demand) becomes
    unreachable while a pod is bound and the history of the gap is compacted: the watch logs, retries and re-lists,
    the shadow keeps running and judges the bind it missed on the cache as it was before the re-list (late)."""
    from tests.support.kube_standin import StandinApiServer
    from tests.support.standin_cases import api_client_for

    with StandinApiServer() as server:
        server.add_node("n1", cpu="4", memory="8Gi")
        server.add_node("n2", cpu="4", memory="8Gi")
        server.add_pod("before", node="n1", cpu="3200m")
        server.add_pod("p", cpu="500m")
        # no forecasts; outcomes from a Prometheus that answers at the start (else kso shadow does not start) and
        # that nobody serves after (the records wait for it)
        env = {"KSO_FORECAST_SOURCE": "NONE", "KSO_PROMETHEUS_URL": prometheus.url,
               "KSO_SHADOW_ADDRESS": "", "KSO_SHADOW_REPORT": str(tmp_path / "r.md")}
        running = start(env, api_client=api_client_for(server), sync_timeout_s=10, check_every_s=3600.0)
        prometheus.stop()
        try:
            shadow = running.shadow
            assert running.watcher.synced and shadow.state.pending_pod(namespace="default", name="p")
            assert server.wait_for_watches(2)
            with caplog.at_level(logging.WARNING, logger="kso.core.kube"):
                server.partition()
                assert server.bind("default", "p", {"target": {"name": "n1"}})[0] == 201  # missed: kso cannot watch
                server.compact()  # ... and the history covering the gap is gone
                time.sleep(1.5)
                server.heal()
                assert shadow.wait_judged(1, 30), running.watcher.stats()
            assert any("kube watcher pods" in r.getMessage() for r in caplog.records)
            [record] = shadow.pending
            assert (record.pod, record.chosen, record.late) == ("default/p", "n1", True)
            # judged before the re-list applied it: "before"'s 3.2 cpus on n1, not p's 0.5 (4.2 would not fit)
            assert record.fitting == 2 and "Insufficient cpu" not in record.reasons
            assert until(lambda: any(p.name == "p" and p.node_name == "n1" for p in shadow.state.bound_pods()), 5,
                         "the re-list applied after the judgement")
            assert shadow.tally.late == 1 and running.watcher.relists >= 1
        finally:
            running.close()
            if prometheus.proc is None:
                prometheus.start()


def test_a_prometheus_that_does_not_answer_is_an_error_at_the_start(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """KSO_PROMETHEUS_URL naming a Prometheus that does not answer: one line naming it and why, exit 1, at once (before
    any cluster is read), not a shadow judging without forecasts and reading no outcome."""
    from kso.cli import main as kso_main

    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("KSO_PROMETHEUS_URL", url)
    monkeypatch.setenv("KSO_PROMETHEUS_RETRIES", "0")
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")  # the cluster would be a later error
    t0 = time.monotonic()
    assert kso_main(["shadow", "--address", "127.0.0.1:0", "--duration", "1"]) == 1
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err
    assert err.strip() == (f"kso shadow: Prometheus at {url} (KSO_PROMETHEUS_URL): cannot connect (Connection refused); "
                           "kso shadow reads its forecasts and outcomes there (KSO_FORECAST_SOURCE=NONE without "
                           "KSO_PROMETHEUS_URL: node annotations, no outcomes)"), err


def test_a_dead_api_server_is_an_error_at_the_start(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A kubeconfig whose API server does not answer: one line naming it, exit 1, in seconds (the shadow ran its whole
    --duration and wrote an empty report that never said so)."""
    from kso.cli import main as kso_main

    monkeypatch.delenv("KSO_PROMETHEUS_URL", raising=False)
    port = free_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: dead, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: dead, context: {{cluster: dead, user: u}}}}]
current-context: dead
""")
    report = tmp_path / "report.md"
    t0 = time.monotonic()
    assert kso_main(["shadow", "--kubeconfig", str(kubeconfig), "--address", "", "--report", str(report),
                     "--duration", "20"]) == 1
    assert time.monotonic() - t0 < 15
    err = capsys.readouterr().err.strip()
    assert err == f"kso shadow: the API server at http://127.0.0.1:{port} does not answer: cannot connect (Connection " \
                  "refused)", err
    assert not report.exists()


def test_a_taken_address_is_an_error_naming_it(control_plane: Any, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import socket

    from kso.cli import main as kso_main

    monkeypatch.delenv("KSO_PROMETHEUS_URL", raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        assert kso_main(["shadow", "--kubeconfig", str(control_plane.kubeconfig), "--address", address,
                         "--report", str(tmp_path / "r.md"), "--duration", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"kso shadow: --address / KSO_SHADOW_ADDRESS {address}: cannot listen there (Address already in use)", err
