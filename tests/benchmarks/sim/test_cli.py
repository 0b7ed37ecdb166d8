"""``kso bench`` explains itself: the default run shows a difference, an option that cannot apply is an argparse
error (exit 2) and never a silent change, named sweeps expand, and a run with no overload says why instead of
plotting flat zeros."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.sim.cli import SWEEPS, expand_policies, main


@pytest.mark.parametrize(("argv", "message"), [
    (["--scenario", "google-embedded", "--hours", "10"], "--hours 10: google-embedded-40n-4h-s0 holds 4 h"),
    (["--trace", "embedded", "--hours", "10"], "--hours 10: embedded-40n-4h-s0 holds 4 h"),
    (["--scenario", "google-embedded", "--seeds", "3"], "google-embedded is one fixed excerpt (seed 0)"),
    (["--scenario", "google-embedded", "--nodes", "100"], "--nodes: google-embedded has its own 40 nodes"),
    (["--trace", "embedded", "--seeds", "3"], "--seeds: only with --scenario"),
    (["--trace", "embedded", "--fixed-size"], "--fixed-size: a --trace run is already one replay on a fixed pool"),
    (["--trace", "embedded", "--nodes", "50"], "--nodes: the embedded excerpt has its own 40 nodes"),
    (["--scenario", "google-embedded", "--trace", "openb"], "--trace picks a single run"),
    (["--scenario", "google-embedded", "--u-star", "0.8"], "--u-star: single-run options"),
    (["--scenario", "google-embedded", "--executor", "ray", "--jobs", "2"], "--jobs sets local worker processes"),
    (["--scenario", "nope"], "--scenario: unknown nope"),
    (["--policies", "frontier,bogus"], "unknown policies bogus"),
    # malformed specs: a clear error before anything runs, never a spec split or dropped silently
    (["--policies", 'default,"kso-inproc:env=KSO_WEIGHTS=safe-overload=1'], "--policies: unexpected end of data"),
    (["--policies", 'kso-inproc:env="KSO_WEIGHTS=safe-overload=1,pigeon-holing=20"'],
     "a spec holding a comma is quoted whole"),
    (["--policies", "trimaran-tlp:target"], "policy spec 'trimaran-tlp:target': 'target' is not key=value"),
    (["--policies", "kso-inproc:env=SAFEUTILIZATION"],
     "policy spec 'kso-inproc:env=SAFEUTILIZATION': env entry 'SAFEUTILIZATION' is not VARIABLE=value"),
    (["--policies", ":target=40"], "policy spec ':target=40': no policy name"),
    (["--scenario", "google-embedded", "--policies", "default,trimaran-tlp:=40"], "'=40' is not key=value"),
])
def test_an_option_that_cannot_apply_is_an_argparse_error(argv: list[str], message: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--out", str(tmp_path), "--no-plots"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and message in err
    assert not (tmp_path / "cells.jsonl").exists()


def test_named_sweeps_expand_in_order_once() -> None:
    assert expand_policies("tlp-target") == ["trimaran-tlp:target=20", "trimaran-tlp:target=40", "trimaran-tlp:target=60",
                                             "trimaran-tlp:target=80"]
    assert expand_policies("default,default-fit,oracle") == ["default", "default-most", "oracle"]
    frontier = expand_policies("frontier")
    assert frontier == list(dict.fromkeys(frontier))
    for name in ("default-fit", "tlp-target", "koord-threshold", "kso-ustar", "kso-plan-ustar", "oracle"):
        assert set(SWEEPS[name]) <= set(frontier)
    assert "kso-inproc:env=SAFEUTILIZATION=70" in frontier and "koordinator:cpu_threshold=85" in frontier


def test_a_spec_holding_commas_is_quoted_whole_and_reaches_its_policy() -> None:
    """KSO_WEIGHTS' value is itself comma-separated: quoted, the spec is one item of --policies, its value whole."""
    from benchmarks.sim.runner import parse_spec, policy_for
    from extender.config import load_config

    weighted = "kso-inproc:env=KSO_WEIGHTS=safe-overload=1,pigeon-holing=20&SAFEUTILIZATION=80;stats=forecast"
    specs = expand_policies(f'default, "{weighted}",tlp-target')
    assert specs == ["default", weighted, *SWEEPS["tlp-target"]]
    assert expand_policies("default,default-most") == ["default", "default-most"]  # the plain syntax is unchanged
    name, kwargs = parse_spec(weighted)
    env = {"KSO_WEIGHTS": "safe-overload=1,pigeon-holing=20", "SAFEUTILIZATION": "80"}
    assert (name, kwargs) == ("kso-inproc", {"env": env, "stats": "forecast"})
    policy = policy_for(weighted, 0)
    assert policy.env == env and policy.name == weighted
    assert load_config(policy.env).settings.weights == {"safe-overload": 1, "pigeon-holing": 20}


def test_help_documents_the_sweeps(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "  tlp-target       trimaran-tlp:target=20, trimaran-tlp:target=40, " in out
    assert "  frontier         all of the above" in out and "--executor {local,ray}" in out and "one seed: no interval" in out
    assert "written whole in double quotes" in " ".join(out.split())  # --policies' grammar for a value with commas


def test_default_run_is_the_google_excerpt_and_shows_a_difference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--hours", "1", "--policies", "default,default-most", "--out", str(tmp_path), "--no-plots"])
    assert rc == 0
    rows = [json.loads(line) for line in (tmp_path / "cells.jsonl").read_text().splitlines()]
    assert {r["scenario"] for r in rows} == {"google-embedded"}
    by = {r["policy"]: r for r in rows}
    assert by["default"]["provisioned_node_hours"] != by["default-most"]["provisioned_node_hours"]
    report = (tmp_path / "report.md").read_text()
    assert "one seed: no interval" in report and "mean ± 95%" not in report
    assert "no --scenario or --trace: the default, --scenario google-embedded" in capsys.readouterr().err


def test_start_warm_runs_the_warm_up_under_the_default_policy_and_the_report_names_it(tmp_path: Path) -> None:
    rc = main(["--hours", "1", "--policies", "default-most", "--start", "warm", "--out", str(tmp_path), "--no-plots"])
    assert rc == 0
    (row,) = [json.loads(line) for line in (tmp_path / "cells.jsonl").read_text().splitlines()]
    assert row["start"] == "warm" and row["policy"] == "default-most"
    for key in ("overloaded_node_hours_80", "overloaded_node_hours_90", "overloaded_node_hours_100",
                "memory_over_allocatable_node_hours", "start_latency_p50_s", "start_latency_p99_s", "pods_started"):
        assert isinstance(row[key], float), key
    report = (tmp_path / "report.md").read_text()
    assert "- start: warm (the cluster already ran the trace under kube-scheduler's default" in report
    # --report-only keeps to the rows of the start asked for: a cold report of warm rows has none of them
    assert main(["--policies", "default-most", "--out", str(tmp_path), "--no-plots", "--report-only"]) == 0
    assert "## google-embedded" not in (tmp_path / "report.md").read_text()


def test_other_scenarios_keep_their_seeds_beside_google_embedded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--scenario", "google-embedded,embedded", "--seeds", "2", "--hours", "0.5", "--policies", "default",
               "--out", str(tmp_path), "--no-plots"])
    assert rc == 0
    rows = [json.loads(line) for line in (tmp_path / "cells.jsonl").read_text().splitlines()]
    assert sorted((r["scenario"], r["seed"]) for r in rows) == [("embedded", 0), ("embedded", 1), ("google-embedded", 0)]
    assert "google-embedded: one fixed excerpt, seed 0 only; the other scenarios run seeds 0..1" in capsys.readouterr().err


def test_a_run_with_no_overload_says_why_instead_of_plotting_flat_zeros(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    rc = main(["--trace", "embedded", "--hours", "0.5", "--policies", "default", "--out", str(tmp_path)])
    assert rc == 0
    assert "No policy had a node above U* = 90% at any step" in capsys.readouterr().out
    report = (tmp_path / "report.md").read_text()
    assert "of their cpu request" in report and "kso bench --scenario google-embedded" in report
    assert (tmp_path / "overloads.png").stat().st_size > 1000  # the fullest node's demand against U*, not zeros
