"""kso shadow's parts that need no cluster: the judging queue and the pending cap, the horizon check, the light
--help, the report's misses and safety changes, and the state across a restart. Real components throughout (the
cluster store, the decision engine, the report); no API server or Prometheus is asked."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from kso.core.net import free_port
from tests.shadow.test_shadow import metric


def test_memory_is_bounded_by_the_queue_and_the_pending_cap() -> None:
    """Binds past the judging queue are skipped and counted; judged binds past KSO_SHADOW_MAX_PENDING drop the oldest,
    counted: a shadow that cannot keep up or cannot reach Prometheus holds a bounded number of either."""
    from dataclasses import replace

    from decisions.engine import DecisionEngine
    from extender.config import load_config
    from forecasting.prometheus import PrometheusSettings
    from shadow.judge import judge
    from shadow.outcomes import Outcomes
    from shadow.run import Shadow
    from shadow.settings import ShadowSettings
    from tests.support.fixtures import make_node, make_pod, make_state

    state = make_state([make_node("n1"), make_node("n2")])
    engine = DecisionEngine(load_config({"KSO_AGENTS": "safe,pigeon"}), state)
    settings = replace(load_config({"KSO_SHADOW_QUEUE": "2", "KSO_SHADOW_MAX_PENDING": "3"}).load(ShadowSettings),
                       report_path="")
    assert (settings.queue, ShadowSettings().queue) == (2, 512)
    outcomes = Outcomes(PrometheusSettings(), settings, 60.0, "node", "")
    shadow = Shadow(engine, state, settings, outcomes, 0.9, {})
    for i in range(5):  # nobody judges: the queue holds 2
        shadow.on_bind(make_pod(f"p{i}", node="n1"), late=False)
    assert (shadow.tally.seen, shadow.tally.skipped, shadow.binds.qsize()) == (5, 3, 2)
    assert metric(generate_latest(shadow.metrics.registry).decode(), "kso_shadow_skipped_share") == 0.6
    assert "skipped with a full judging queue 3 (60.0 % of binds; KSO_SHADOW_QUEUE)" in shadow.report()
    for _ in range(2):
        shadow.add(judge(engine, shadow.binds.get_nowait()))
    for i in range(2, 5):
        pod = make_pod(f"p{i}", node="n1")
        shadow.on_bind(pod, late=False)
        shadow.add(judge(engine, shadow.binds.get_nowait()))
    assert len(shadow.pending) == 3 and shadow.tally.dropped == 2
    assert [r.pod for r in shadow.pending] == ["default/p2", "default/p3", "default/p4"]  # the oldest went
    text = generate_latest(shadow.metrics.registry).decode()
    assert metric(text, 'kso_shadow_binds_total{result="skipped"}') == 3
    assert metric(text, "kso_shadow_records_dropped_total") == 2 and metric(text, "kso_shadow_pending_records") == 3


def test_a_horizon_shorter_than_the_rate_window_is_refused_at_the_start(capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Outcomes read through the 5-minute rate of KSO_QUERY_NODE_CPU with a 180 s horizon mix the horizon with the
    load before the bind (a node at 99.5 % read 79 %): refused, one line naming both, before any server is asked."""
    from kso.cli import main as kso_main

    monkeypatch.setenv("KSO_PROMETHEUS_URL", f"http://127.0.0.1:{free_port()}")  # nobody there: never asked
    monkeypatch.setenv("KSO_FORECAST_HORIZON", "180")
    assert kso_main(["shadow", "--address", "", "--duration", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("kso shadow: KSO_FORECAST_HORIZON 180 s is shorter than the 300 s window of "
                          "KSO_QUERY_NODE_CPU (1 - avg by ($by) (rate(node_cpu_seconds_total{mode=\"idle\"}[5m])))"), err
    assert err.endswith("Set KSO_FORECAST_HORIZON to 300 s or more, or use a shorter window in KSO_QUERY_NODE_CPU"), err
    monkeypatch.setenv("KSO_QUERY_NODE_CPU", '1 - avg by ($by) (rate(node_cpu_seconds_total{mode="idle"}[2m]))')
    assert kso_main(["shadow", "--address", "", "--duration", "1"]) == 1  # past the check: Prometheus is not there
    assert "cannot connect" in capsys.readouterr().err


def test_help_imports_neither_the_engine_nor_a_heavy_library() -> None:
    """`kso shadow --help` builds its parser from shadow/cli.py alone (it took 0.58 s of CPU importing the decision
    engine, numpy and the kubernetes client; `kso forecast --help` 0.27 s)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kso.cli", "shadow", "--help"], cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--records" in proc.stdout, proc.stderr[-2000:]
    imported = {ln.rsplit("|", 1)[-1].strip() for ln in proc.stderr.splitlines() if ln.startswith("import time:")}
    # (the layers' bare packages are looked up for the other commands' lines: empty, as in tests/kso/test_cli.py)
    heavy = sorted(m for m in imported if m.split(".")[0] in ("numpy", "scipy", "kubernetes", "prometheus_client")
                   or (m.split(".")[0] in ("extender", "scheduler", "forecasting") and "." in m)
                   or m in ("shadow.run", "decisions"))
    assert not heavy, heavy


def test_misses_are_listed_beside_the_changes() -> None:
    """kso's own picks that went over U* (same node included) have their table; score-only changes are counted, not
    listed; the OOM kills of the tally are each kill once (oom_new), not each window's."""
    from shadow.judge import NodeOutcome, Record
    from shadow.report import Tally, markdown

    def rec(pod: str, chosen: str, pick: str | None, warned: bool, peak: float, extra: float) -> Record:
        r = Record(uid=pod, pod=f"ns/{pod}", scheduler="default-scheduler", cpu_m=500, memory_mb=256, at=1.8e9,
                   chosen=chosen, pick=pick, warned=warned, reasons=["safe-overload: x"] if warned else [],
                   chosen_score=None, pick_score=None, chosen_risk=0.5, pick_risk=0.1, pick_share=(extra, 0.0),
                   nodes=3, fitting=3, passing=2)
        r.chosen_outcome = NodeOutcome(peak_cpu=0.95, peak_memory=0.5, oom_kills=3, oom_new=1)
        r.pick_outcome = NodeOutcome(peak_cpu=peak, peak_memory=0.5, pod_share=(extra, 0.0), oom_kills=3, oom_new=0)
        return r

    tally = Tally()
    records = [rec("same-miss", "n1", "n1", False, 0.95, 0.0), rec("score", "n1", "n2", False, 0.5, 0.1),
               rec("safety-miss", "n1", "n3", True, 0.85, 0.125)]
    for r in records:
        tally.add(r)
        tally.add_outcome(r, 0.9, 0.25)
    misses = [r for r in records if r.missed(0.9)]
    assert [r.pod for r in misses] == ["ns/same-miss", "ns/safety-miss"]  # 0.85 + 0.125 over, with kso's pods
    text = markdown(tally, [r for r in records if r.kind == "safety"], {}, 0.9, now=1.8e9, misses=misses)
    assert "| 0 of 3 (0 %) | 3 of 3" not in text and "OOM kills on chosen nodes / on kso's picks (each kill once) | 3 / 0 |" \
        in text
    assert "picks that went over U\\*** (in its schedule" in text and "| 2 of 3 (67 %) |" in text
    section = text.split("## kso's latest misses")[1].split("##")[0]
    assert "ns/same-miss | n1 | 0.10 | 95% (+kso 95%) > U*" in section and "| n1 (same) |" in section
    assert "ns/safety-miss | n3 | 0.10 | 85% (+kso 98%) > U*" in section
    changes = text.split("changed for safety")[1]
    assert "ns/safety-miss" in changes and "ns/score" not in changes
    assert "| kso would have placed the pod elsewhere on score alone (it accepted the chosen node) | 1 of 3 (33 %) |" \
        in text


def test_the_state_survives_a_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """KSO_SHADOW_STATE: the totals, the binds waiting for their outcome, the misses and safety changes are saved and
    read by the next shadow (kso shadow restarted: a week of judgements is not lost); a file that does not parse is
    moved aside with a warning and the shadow starts afresh."""
    from decisions.engine import DecisionEngine
    from extender.config import load_config
    from forecasting.prometheus import PrometheusSettings
    from shadow.judge import NodeOutcome
    from shadow.outcomes import Outcomes
    from shadow.run import Shadow
    from shadow.settings import ShadowSettings
    from tests.support.fixtures import make_node, make_pod, make_state

    path = tmp_path / "state" / "shadow.json"
    config = load_config({"KSO_AGENTS": "safe,pigeon", "KSO_SHADOW_STATE": str(path), "KSO_SHADOW_REPORT": ""})
    settings = config.load(ShadowSettings)

    def shadow() -> Shadow:
        state = make_state([make_node("n1"), make_node("n2")])
        outcomes = Outcomes(PrometheusSettings(), settings, 600.0, "node", "")
        return Shadow(DecisionEngine(config, state), state, settings, outcomes, 0.9, {})

    first = shadow()
    first.restore()  # nothing saved yet
    for i in range(3):
        first.on_bind(make_pod(f"p{i}", node="n1"), late=False)
        first.add(judge_one(first))
    first.pending[0].chosen_outcome = NodeOutcome(peak_cpu=0.5)
    first.outcomes.oom_counted[("chosen", "n1")] = 123.0
    first.save_state()
    before = first.report(now=2e9)

    second = shadow()
    second.restore()
    assert [r.pod for r in second.pending] == ["default/p0", "default/p1", "default/p2"]
    assert second.pending[0].chosen_outcome == NodeOutcome(peak_cpu=0.5)
    assert (second.tally.seen, second.tally.judged, second.tally.started) == (3, 3, first.tally.started)
    assert second.outcomes.oom_counted == {("chosen", "n1"): 123.0}
    def kept(text: str) -> list[str]:  # the report but kso's schedule, which starts again from the cluster as it is
        summary, rest = text.split("## What kso judged with")
        return [ln for ln in summary.splitlines() if "in kso's schedule" not in ln] + \
            rest.split("## kso's latest misses")[1].splitlines()

    assert kept(second.report(now=2e9)) == kept(before)  # the same totals, the same tables
    assert "| binds seen | 3: judged 3" in before
    second.on_bind(make_pod("p3", node="n2"), late=False)
    second.add(judge_one(second))
    assert second.tally.judged == 4

    path.write_text("{not json")
    third = shadow()
    with caplog.at_level(logging.WARNING, logger="kso.shadow"):
        third.restore()
    assert third.tally.judged == 0 and not path.exists() and path.with_name("shadow.json.bad").exists()
    assert any("KSO_SHADOW_STATE" in r.getMessage() and "starting afresh" in r.getMessage() for r in caplog.records)


def judge_one(shadow: Any) -> Any:
    from shadow.judge import judge

    return judge(shadow.engine, shadow.binds.get_nowait(), shadow.counterfactual)


def test_kso_s_schedule_follows_deletions_and_re_lists_in_the_watch_s_order() -> None:
    """A pod deleted before a bind's snapshot is off kso's schedule when that bind is judged, one deleted after it is
    still on it; a re-list drops the pods it no longer lists; a pod deleted before its own bind was judged never
    enters it."""
    from kso.core.objects import pod_from_k8s
    from shadow.counterfactual import Counterfactual
    from tests.support.fixtures import make_node, make_pod, make_state

    state = make_state([make_node("n1"), make_node("n2")])
    cf = Counterfactual(recent_window_s=0.0)  # requests only: no recent-bind load to follow
    real = state.view(["n1", "n2"])

    def cpu(upto: int) -> list[float]:
        view = cf.apply(real, upto, 1e9)
        return list(view.requested[:, view.columns["cpu"]])

    for name in ("a", "b", "c"):  # each bound to n1 by the cluster's scheduler, on n2 in kso's schedule
        cf.place(pod_from_k8s(make_pod(name, cpu="500m")), "n1", "n2", 1e9, real, real)
    assert cpu(cf.seq) == [0.0, 1500.0]  # (n1's real rows hold none of them here: taken off, never below 0)
    cf.note_gone("uid-default-a")
    seq_after_a = cf.seq
    cf.note_gone("uid-default-b")
    assert cpu(seq_after_a) == [0.0, 1000.0]  # b's deletion came after this bind's snapshot
    assert cpu(cf.seq) == [0.0, 500.0]
    cf.note_listed(frozenset())  # a re-list without c
    assert cpu(cf.seq) == [0.0, 0.0] and not cf.placed
    cf.note_gone("uid-default-d")  # deleted before its bind was judged
    cpu(cf.seq)
    cf.place(pod_from_k8s(make_pod("d", cpu="500m")), "n1", "n2", 1e9, real, real)
    assert cpu(cf.seq) == [0.0, 0.0] and cf.nodes["n2"].moved_in == 4 and cf.nodes["n2"].live_in == 0
