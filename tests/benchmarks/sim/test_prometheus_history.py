"""``kso bench --prometheus``'s input builder on a real Prometheus, backfilled (promtool) with kube-state-metrics-
and cAdvisor-shaped series generated from the Google 2019 join of benchmarks/sim/google.py.

Tolerance of the reproduction: the generated history puts every counter increment and working-set sample on the
step grid (a 60 s scrape, 5 scrapes a step), so ``rate(...[5m])`` at a step's end is that step's usage up to
float64 rounding (the counters are cumulative sums), and requests pass through cores (/1000, x1000): usage and
requests are compared at a relative 1e-9, lifetimes, names, owners and nodes exactly, and every policy's replay
metrics exactly (same placements). On a real cluster the two would differ where its history does: scrapes not on
the step grid make the rate window straddle two steps, and a pod's first and last partial steps."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from benchmarks.sim.cli import main as bench_main
from benchmarks.sim.engine import Autoscaler, EngineRules, run
from benchmarks.sim.google import build_google_scenario
from benchmarks.sim.history_actual import measure_actual
from benchmarks.sim.history_openmetrics import aligned_start, backfill, template_hash, write_openmetrics
from benchmarks.sim.metrics import compute
from benchmarks.sim.policies import make_policy
from benchmarks.sim.prometheus_history import (
    POD_TEMPLATE_HASH,
    HistoryError,
    build_history,
    load_scenario,
    parse_duration,
    parse_time,
    save_scenario,
)
from benchmarks.sim.trace import Scenario
from forecasting.prometheus import PrometheusUnavailable
from kso.core.net import free_port
from tests.support.prom_server import PromServer, prometheus_binaries

STEP = 300.0
HOURS = 2.0
NODES = 20


def placed(s: Scenario) -> np.ndarray:
    """Where the history's cluster ran each pod (kube_pod_info's node): round robin."""
    return np.arange(s.n_pods) % s.n_nodes


def oom_kills(s: Scenario, n: int = 3) -> list[tuple[int, int]]:
    """(pod, step) of the history's OOM kills: two of one pod, one of another, after the replay's warm-up, each while
    the pod lives on for another step (its restart is reported)."""
    alive = [i for i in range(s.n_pods) if s.pod_arrival[i] <= 8 and s.pod_departure[i] > 20]
    return [(alive[0], 10), (alive[0], 15), (alive[1], 12)][:n]


def serve(workdir: Path, om_lines: list[str] | None, scenario: Scenario, start: float) -> PromServer:
    """Write ``scenario``'s history (or the given lines), backfill it and start Prometheus on it."""
    bins = prometheus_binaries()
    assert bins is not None, "prometheus/promtool not installed (apt-get install -y prometheus)"
    om = workdir / "history.om"
    if om_lines is None:
        write_openmetrics(scenario, om, start, pod_node=placed(scenario), oom_kills=oom_kills(scenario))
    else:
        om.write_text("".join(om_lines))
    backfill(om, workdir / "tsdb", bins[1])
    server = PromServer(bins[0], workdir, np.zeros(0), {}, np.zeros(0), np.zeros(0),
                        provenance="kube-state-metrics and cAdvisor series generated from the Google 2019 join")
    server.start()
    return server


@pytest.fixture(scope="module")
def direct() -> Scenario:
    return build_google_scenario(NODES, HOURS, seed=0, target_load=0.6, requests="p90")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, direct: Scenario) -> Iterator[tuple[PromServer, float]]:
    start = aligned_start(STEP)
    server = serve(tmp_path_factory.mktemp("history"), None, direct, start)
    yield server, start
    server.stop()


def test_built_scenario_is_the_direct_one(history: tuple[PromServer, float], direct: Scenario) -> None:
    server, start = history
    h = build_history(server.url, start, start + HOURS * 3600, STEP)
    b = h.scenario
    assert b.n_steps == direct.n_steps == 24 and b.step_s == STEP
    assert b.node_names == direct.node_names
    assert np.array_equal(b.node_cpu, direct.node_cpu) and np.array_equal(b.node_memory, direct.node_memory)
    assert b.pod_names == direct.pod_names  # same order: the engine offers pods of one step in this order
    assert np.array_equal(b.pod_arrival, direct.pod_arrival)
    assert np.array_equal(b.pod_departure, direct.pod_departure)  # deleted, completed, vanished and still running
    for ours, theirs in ((b.pod_cpu, direct.pod_cpu), (b.pod_memory, direct.pod_memory),
                         (b.pod_cpu_limit, direct.pod_cpu_limit), (b.pod_memory_limit, direct.pod_memory_limit)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9)
    np.testing.assert_allclose(b.pod_usage, direct.pod_usage, rtol=1e-6, atol=0)  # float32 either way
    assert b.pod_owner == direct.pod_owner  # ReplicaSet minus its pod-template-hash
    assert [lab["kubernetes.io/hostname"] for lab in b.node_labels] == direct.node_names
    assert not [g for g in h.gaps if "missing" in g or "without" in g or "NaN" in g], h.gaps
    assert any("step k" in a for a in h.assumptions) and any("first sample" in a for a in h.assumptions)
    assert h.points > 2 * direct.n_pods  # the usage came from Prometheus, not from nowhere


POLICIES = ("default", "default-most", "trimaran-tlp", "koordinator", "kso-inproc", "oracle")


def test_every_policy_replays_the_same_from_prometheus(history: tuple[PromServer, float], direct: Scenario) -> None:
    server, start = history
    built = build_history(server.url, start, start + HOURS * 3600, STEP).scenario
    for spec in POLICIES:
        kwargs = {"stats": "window"} if spec.startswith("kso") else {}
        ours = compute(run(built, make_policy(spec, 0, **kwargs), None, autoscaler=Autoscaler()))
        theirs = compute(run(direct, make_policy(spec, 0, **kwargs), None, autoscaler=Autoscaler()))
        numbers = [f.name for f in fields(theirs) if isinstance(getattr(theirs, f.name), int | float)
                   and f.name not in ("wall_s",)]
        assert {"overloaded_node_hours", "pods_oom_killed", "provisioned_node_hours", "scheduled"} <= set(numbers)
        for key in numbers:
            a, b = float(getattr(ours, key)), float(getattr(theirs, key))
            assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (spec, key, a, b)
        assert ours.extra.keys() == theirs.extra.keys()
        for key, value in theirs.extra.items():
            if isinstance(value, int | float) and key != "wall_s" and not key.endswith("_s"):
                assert math.isclose(float(ours.extra[key]), float(value), rel_tol=1e-9, abs_tol=1e-9), (spec, key)


def test_chunked_queries_give_the_same_scenario(history: tuple[PromServer, float], direct: Scenario,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded points per query: 1,000 points for ~900 pods = one step per range query, and 20-minute inventory
    windows; same scenario, more queries."""
    server, start = history
    monkeypatch.setenv("KSO_HISTORY_MAX_POINTS", "1000")
    monkeypatch.setenv("KSO_HISTORY_INVENTORY_CHUNK", "1200")
    h = build_history(server.url, start, start + HOURS * 3600, STEP)
    assert h.queries >= 6 * 11 + 2 * 24
    assert np.array_equal(h.scenario.pod_departure, direct.pod_departure)
    assert np.array_equal(h.scenario.pod_arrival, direct.pod_arrival)
    np.testing.assert_allclose(h.scenario.pod_usage, direct.pod_usage, rtol=1e-6, atol=0)


def test_a_saved_history_loads_as_the_same_scenario(history: tuple[PromServer, float], tmp_path: Path) -> None:
    server, start = history
    s = build_history(server.url, start, start + 3600, STEP).scenario
    back = load_scenario(save_scenario(s, tmp_path / "h.npz"))
    assert back.describe() == s.describe() and back.pod_names == s.pod_names and back.node_labels == s.node_labels
    assert np.array_equal(back.pod_usage, s.pod_usage) and back.notes == s.notes and back.sources == s.sources


def test_an_empty_range_is_an_error_not_an_empty_scenario(history: tuple[PromServer, float]) -> None:
    server, start = history
    with pytest.raises(HistoryError, match="no kube_pod_created series"):
        build_history(server.url, start - 30 * 86400, start - 29 * 86400, STEP)


def test_a_dead_prometheus_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PrometheusUnavailable, match="127.0.0.1"):
        build_history(url, 1.7e9, 1.7e9 + 3600, STEP)


def test_times_and_durations() -> None:
    now = 1_800_000_000.0
    assert parse_time("2026-11-20T00:00:00Z") == 1_795_132_800.0
    assert parse_time("2026-11-20T01:00:00+01:00") == 1_795_132_800.0
    assert parse_time("-7d", now) == now - 7 * 86400 and parse_time("-1h30m", now) == now - 5400
    assert parse_time("now", now) == now and parse_time("1795132800") == 1_795_132_800.0
    assert parse_duration("5m") == 300 and parse_duration("300") == 300 and parse_duration("1h30m") == 5400
    for bad in ("yesterday", "2026-11-20 00:00", "-7x", "2026-13-01T00:00:00Z", ""):
        with pytest.raises(HistoryError):
            parse_time(bad, now)
    with pytest.raises(HistoryError, match="UTC offset"):
        parse_time("2026-11-20T00:00:00", now)
    with pytest.raises(HistoryError):
        parse_duration("5 minutes")
    with pytest.raises(HistoryError, match="not before"):
        build_history("http://127.0.0.1:1", now, now - 10, STEP)


def test_the_owner_is_the_replicaset_minus_its_pod_template_hash() -> None:
    assert POD_TEMPLATE_HASH.sub("", f"web-{template_hash('web')}") == "web"
    assert POD_TEMPLATE_HASH.sub("", "web-7d4b9c6f5d") == "web"
    assert POD_TEMPLATE_HASH.sub("", "db") == "db"


# ---- a history with holes: each one found, stated and filled as the assumptions say ------------------------

def _gappy_lines(s: Scenario, start: float, workdir: Path) -> tuple[list[str], dict[str, object]]:
    om = workdir / "clean.om"
    write_openmetrics(s, om, start)
    lines = om.read_text().splitlines(keepends=True)
    long_lived = [i for i in range(s.n_pods) if s.pod_arrival[i] == 0 and s.pod_departure[i] > s.n_steps]
    nan_pod, silent_pod, twice_pod = (s.pod_names[i] for i in long_lived[:3])
    lost_node = s.node_names[-1]
    nan_at = {int(start + k * STEP) for k in (4, 5)}  # memory samples at the ends of steps 3 and 4
    outage = (start + 6 * STEP, start + 8 * STEP)  # no cAdvisor scrape: steps 6 and 7 have no usage at all
    out = []
    for line in lines:
        ts = float(line.rsplit(" ", 1)[1]) if not line.startswith("#") else math.nan
        if line.startswith("container_") and f'pod="{silent_pod}"' in line:
            continue
        if line.startswith("container_") and outage[0] < ts <= outage[1]:
            continue
        if line.startswith("kube_node_status_allocatable") and f'node="{lost_node}"' in line:
            continue
        if (line.startswith("container_memory_working_set_bytes") and f'pod="{nan_pod}"' in line
                and 'container="app"' in line and int(ts) in nan_at):
            head, _, stamp = line.rsplit(" ", 2)[0], None, line.rsplit(" ", 1)[1]
            line = f"{head} NaN {stamp}"
        out.append(line)
        if line.startswith(("container_", "kube_pod_container_resource_requests")) and f'pod="{twice_pod}"' in line:
            out.append(line.replace("{", '{instance="second-exporter",', 1))  # the same container reported twice
    return out, {"nan_pod": nan_pod, "silent_pod": silent_pod, "lost_node": lost_node, "twice_pod": twice_pod}


@pytest.fixture(scope="module")
def gappy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PromServer, float, Scenario, dict[str, object]]]:
    s = build_google_scenario(6, 1.0, seed=1, target_load=0.6, requests="p90")
    start = aligned_start(STEP, days_ago=3)
    workdir = tmp_path_factory.mktemp("gappy")
    lines, what = _gappy_lines(s, start, workdir)
    server = serve(workdir, lines, s, start)
    yield server, start, s, what
    server.stop()


def test_every_hole_is_a_stated_gap_and_filled_by_the_stated_rule(
        gappy: tuple[PromServer, float, Scenario, dict[str, object]]) -> None:
    server, start, s, what = gappy
    h = build_history(server.url, start, start + 3600, STEP)
    b = h.scenario
    text = "\n".join(h.gaps)
    assert f"nodes without allocatable cpu and memory (1, left out of the pool): {what['lost_node']}" in text
    assert what["lost_node"] not in b.node_names and b.n_nodes == s.n_nodes - 1
    assert "NaN usage samples: 2" in text
    assert f"pods without usage (1, e.g. {what['silent_pod']})" in text
    # the outage: no rate at steps 6-7; the working set of step 5 is still seen at step 6's end through
    # Prometheus' 5-minute lookback (a backfilled series has no staleness marker), so memory misses step 7 only
    assert "no cpu sample for any pod at 2 step(s)" in text and "no memory sample for any pod at 1 step(s)" in text
    i = b.pod_names.index(str(what["nan_pod"]))
    j = s.pod_names.index(str(what["nan_pod"]))
    mem, truth = b.pod_usage[i, :, 1], s.pod_usage[j, :, 1]
    assert mem[3] == mem[2] == truth[2] and mem[4] == truth[2]  # NaN steps 3-4: the previous sample carried
    assert mem[6] == mem[7] == truth[5]  # the outage: carried too
    assert mem[8] == truth[8] and mem[0] == truth[0]
    k = b.pod_names.index(str(what["silent_pod"]))
    assert (b.pod_usage[k] == 1.0).all()  # no sample at all: it uses exactly its request
    i, j = b.pod_names.index(str(what["twice_pod"])), s.pod_names.index(str(what["twice_pod"]))
    assert b.pod_cpu[i] == pytest.approx(s.pod_cpu[j], rel=1e-9) and b.pod_memory[i] == s.pod_memory[j]  # not doubled
    np.testing.assert_allclose(b.pod_usage[i, :6], s.pod_usage[j, :6], rtol=1e-6)  # before the outage: not doubled


# ---- kso bench --prometheus -------------------------------------------------------------------------------------

def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rows(out: Path) -> dict[str, dict[str, object]]:
    return {r["policy"]: r for r in (json.loads(x) for x in (out / "cells.jsonl").read_text().splitlines())}


def test_bench_from_prometheus_matches_the_direct_scenario_run(history: tuple[PromServer, float], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The same cells as --scenario google-rightsized of the same seed and size, in worker processes that load the
    saved history: the same numbers, and the report states the history's gaps and assumptions."""
    server, start = history
    policies = "default,default-most,oracle"
    ours, theirs = tmp_path / "history", tmp_path / "direct"
    assert bench_main(["--prometheus", server.url, "--from", _iso(start), "--to", _iso(start + HOURS * 3600),
                       "--policies", policies, "--jobs", "2", "--out", str(ours), "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert "prometheus [" in err and f"saved to {ours / 'history-scenario.npz'}" in err
    assert bench_main(["--scenario", "google-rightsized", "--nodes", str(NODES), "--hours", str(HOURS), "--seeds", "1",
                       "--target-load", "0.6", "--policies", policies, "--out", str(theirs), "--no-plots"]) == 0
    a, b = _rows(ours), _rows(theirs)
    assert set(a) == set(b) == set(policies.split(","))
    for policy, row in b.items():
        assert a[policy]["scenario"] == "history" and a[policy]["nodes"] == NODES and a[policy]["hours"] == HOURS
        for key, value in row.items():
            if isinstance(value, float) and key != "wall_s":
                assert a[policy][key] == value, (policy, key)
    report = (ours / "report.md").read_text()
    assert "replay of the cluster's own history" in report and "### Gaps in the history" in report
    assert "### Assumptions" in report and "before its first sample: the first sample" in report
    assert "kube-state-metrics" in report.split("## Data sources")[1]
    # --report-only rewrites the report from the saved scenario and rows, without Prometheus
    (ours / "report.md").unlink()
    assert bench_main(["--prometheus", "http://127.0.0.1:1", "--from", _iso(start), "--to", _iso(start + HOURS * 3600),
                       "--policies", policies, "--out", str(ours), "--no-plots", "--report-only"]) == 0
    assert "### Gaps in the history" in (ours / "report.md").read_text()


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["--from", "yesterday"], 2, "kso bench: error: 'yesterday' is not a time"),
    (["--from", "2026-11-20T00:00:00"], 2, "has no UTC offset"),
    (["--from", "-1h", "--step", "5 minutes"], 2, "'5 minutes' is not a duration"),
    (["--from", "-1h", "--to", "-2h"], 2, "is not before --to"),
    (["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T02:00:00Z"], 1, "no kube_pod_created series between"),
])
def test_bad_input_is_one_line_and_an_exit_code(history: tuple[PromServer, float], argv: list[str], code: int,
                                                message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server, _ = history
    assert bench_main(["--prometheus", server.url, *argv, "--out", str(tmp_path), "--no-plots"]) == code
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not line.startswith(("prometheus [", "reading "))]  # the progress lines of the queries made
    assert err == [err[-1]] and message in err[-1] and "Traceback" not in err[-1]
    assert not (tmp_path / "cells.jsonl").exists()


def test_a_dead_prometheus_is_one_line_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert bench_main(["--prometheus", url, "--from", "-2h", "--out", str(tmp_path), "--no-plots"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"kso bench: error: Prometheus at {url} unavailable: query ")
    assert err[0].endswith(": connection refused") and not (tmp_path / "cells.jsonl").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--prometheus", "http://x:9090", "--from", "-1h", "--scenario", "google-embedded"], "drop --scenario / --trace"),
    (["--prometheus", "http://x:9090", "--from", "-1h", "--nodes", "10"], "--nodes: a history has its own nodes"),
    (["--prometheus", "http://x:9090", "--from", "-1h", "--seeds", "3"], "--seeds: a history has its own"),
    (["--prometheus", "http://x:9090"], "--prometheus needs --from"),
    (["--from", "-1h"], "--from: only with --prometheus URL"),
    (["--scenario", "google-embedded", "--step", "1m"], "--step: only with --prometheus URL"),
])
def test_options_that_cannot_go_with_prometheus_are_argparse_errors(argv: list[str], message: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_main([*argv, "--out", str(tmp_path), "--no-plots"])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_history_written_in_scrape_windows_is_the_whole_history(direct: Scenario, tmp_path: Path) -> None:
    """The scale measurement writes a week as one file per day: the windows hold exactly the whole file's samples
    (counters continue, identities stay)."""
    start = 1_795_132_800.0
    write_openmetrics(direct, tmp_path / "all.om", start)
    whole = [x for x in (tmp_path / "all.om").read_text().splitlines() if not x.startswith("#")]
    parts: list[str] = []
    for window in ((0, 37), (37, 100), (100, 10_000)):
        write_openmetrics(direct, tmp_path / "part.om", start, scrapes=window)
        parts += [x for x in (tmp_path / "part.om").read_text().splitlines() if not x.startswith("#")]
    assert len(parts) == len(whole) and sorted(parts) == sorted(whole)


def _expected_actual(s: Scenario, u_star: float = 0.9) -> tuple[float, float]:
    """(node-hours, overloaded node-hours) of the history as the cluster ran it (placed()), from the scenario's own
    arrays, over the steps the replay scores."""
    warm = EngineRules().warmup_steps(s.step_s, s.n_steps)
    usage = s.pod_usage.astype(np.float64) * np.stack([s.pod_cpu / 1000.0, s.pod_memory], axis=1)[:, None, :]
    alloc = np.stack([s.node_cpu / 1000.0, s.node_memory.astype(np.float64)], axis=1)
    node = placed(s)
    over = 0
    for k in range(warm, s.n_steps):
        alive = (s.pod_arrival <= k) & (k < s.pod_departure) & (s.pod_arrival < s.pod_departure)
        load = np.zeros_like(alloc)
        np.add.at(load, node[alive], usage[alive, k, :])
        over += int((load > u_star * alloc).any(axis=1).sum())
    hours = s.step_s / 3600.0
    return s.n_nodes * (s.n_steps - warm) * hours, over * hours


def test_what_the_cluster_actually_ran_is_measured_from_its_history(history: tuple[PromServer, float],
                                                                     direct: Scenario) -> None:
    server, start = history
    warm = EngineRules().warmup_steps(direct.step_s, direct.n_steps)
    got = measure_actual(server.url, start, STEP, direct.n_steps, warm)
    node_hours, overloaded = _expected_actual(direct)
    assert overloaded > 0  # the round-robin placement does overload some nodes: the check below can fail
    assert math.isclose(got.node_hours, node_hours) and math.isclose(got.overloaded_node_hours, overloaded)
    assert (got.oom_kills, got.pods_oom_killed) == (3.0, 2.0)


def test_fixed_size_replay_with_the_clusters_own_row(history: tuple[PromServer, float], direct: Scenario,
                                                     tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--fixed-size: no autoscaler, every node for the whole history; the report puts what the cluster actually ran
    beside every policy and in the verdict."""
    server, start = history
    assert bench_main(["--prometheus", server.url, "--from", _iso(start), "--to", _iso(start + HOURS * 3600),
                       "--policies", "default,kso-inproc", "--fixed-size", "--out", str(tmp_path), "--no-plots"]) == 0
    rows = _rows(tmp_path)
    node_hours, overloaded = _expected_actual(direct)
    for row in rows.values():
        assert row["pool"] == "fixed" and row["scale_ups"] == 0 and row["provisioned_node_hours"] == node_hours
    report = (tmp_path / "report.md").read_text()
    assert "fixed pool (--fixed-size): no autoscaler" in report
    actual_row = next(ln for ln in report.splitlines() if ln.startswith("| actual (measured: the cluster's history) |"))
    assert f"| {overloaded:.1f} |" in actual_row and "| 2 | 3 |" in actual_row  # pods OOM-killed, OOM kills
    verdict = report.split("- machine:")[0]
    assert "what the cluster ran (`actual`)" in verdict and "`actual`: what the cluster actually ran" in verdict


def test_a_history_where_the_policies_tie_says_so_in_one_sentence(history: tuple[PromServer, float], tmp_path: Path) -> None:
    """The first hour at a fixed size through two policies that spread pods (LeastAllocated, Koordinator's
    LoadAware): no node passes U* under either, so they tie, and the report says so instead of the Pareto
    statements."""
    server, start = history
    assert bench_main(["--prometheus", server.url, "--from", _iso(start), "--to", _iso(start + 3600),
                       "--policies", "default,koordinator", "--fixed-size", "--out", str(tmp_path), "--no-plots"]) == 0
    rows = _rows(tmp_path)
    keys = ("provisioned_node_hours", "overloaded_node_hours", "pods_oom_killed", "pods_never_served")
    assert [rows["default"][k] for k in keys] == [rows["koordinator"][k] for k in keys]
    report = (tmp_path / "report.md").read_text()
    assert "**No difference on this history**: all 2 policies give" in report.split("- machine:")[0]
    assert "**Pareto frontier" not in report
