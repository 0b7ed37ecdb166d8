"""``kso demo`` end to end on a short excerpt: its report.md leads with the replay's frontier and holds steps 1-3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.demo import run_demo


def test_demo_report_has_the_frontier_and_steps_1_to_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    assert run_demo(out=str(tmp_path), hours=0.5) == 0
    out = capsys.readouterr().out.splitlines()
    # it concludes first: the verdict, from this run's cells, then the steps 2-3 comparison, then the policies
    assert out[1].startswith("verdict of step 4's replay")
    cells = {r["policy"]: r for r in map(json.loads, (tmp_path / "cells.jsonl").read_text().splitlines())}
    plan_line = next(ln for ln in out[:12] if "on this data `kso-plan` uses" in ln)
    assert sum("on this data `kso-plan` uses" in ln for ln in out) == 1  # once, at the top
    mine, least = cells["kso-plan"]["provisioned_node_hours"], cells["default"]["provisioned_node_hours"]
    assert f"LeastAllocated (`default`) ({mine:.1f} vs {least:.1f})" in plan_line
    assert f"pods never served {cells['kso-plan']['pods_never_served']:.0f} vs " in plan_line
    assert "p99 start latency (s)" in plan_line
    head = "\n".join(out[:out.index("=== 1. forecasts (kso forecast --trace embedded)")])
    plan = json.loads((tmp_path / "plan.json").read_text())
    placed = sum(c["count"] - c["unplaced"] for c in plan["classes"].values())
    assert f"steps 2-3: the plan placed {placed} of 36 pending pods; the extender following it bound " in head
    for name in ("default", "default-most", "trimaran-tlp", "koordinator", "kso-inproc", "kso-plan", "oracle"):
        assert f"  - `{name}`: " in head  # every policy name defined before the steps show it
    assert any(ln.startswith("# note: 1 of 20 forecasts stale: vm-020") for ln in out)  # step 1's stale forecast
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# kso demo: forecasts, a plan, the extender, and the replay's cost-harm frontier")
    assert "**Verdict**" in report.split("## google-embedded")[0]
    assert report.index("### The frontier: cost against harm") < report.index("## Steps 1-3 of this run")
    assert (tmp_path / "frontier-google-embedded.png").stat().st_size > 1000
    for step in ("### 1. Forecasts", "### 2. A plan", "### 3. The extender"):
        section = report.split(step, 1)[1].split("###", 1)[0]
        assert section.count("```") == 2 and len(section.splitlines()) > 5  # the step's own output, fenced
    for spec in ("default-most", "trimaran-tlp:target=80", "koordinator:cpu_threshold=45", "kso-inproc:env=SAFEUTILIZATION=70",
                 "kso-plan", "oracle (reference)"):
        assert f"| {spec} |" in report
    assert "one seed: no interval" in report


def test_demo_refuses_more_hours_than_the_excerpt_before_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(out=str(tmp_path / "d"), hours=10) == 2
    assert "--hours 10: the embedded Google excerpt holds 4 h" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
