"""``kso demo`` end to end on a short excerpt: its report.md leads with the replay's frontier and holds steps 1-3."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.demo import run_demo


def test_demo_report_has_the_frontier_and_steps_1_to_3(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert run_demo(out=str(tmp_path), hours=0.5) == 0
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# kso demo: forecasts, a plan, the extender, and the replay's cost-harm frontier")
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
