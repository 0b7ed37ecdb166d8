"""``kso reoptimize`` (optimizer.reoptimize.cli) without an API server: the demo and snapshot files, trace
forecasts, configuration errors, an unreachable API server and the help the CronJob relies on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kso.cli import main
from optimizer.reoptimize.cli import EXIT_CONFIG
from tests.optimizer.reoptimize_cluster import MOVABLE, node, pod, run, run_json


def test_demo_snapshot_dry_run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KSO_PLAN_POLICY", raising=False)
    code, doc, err = run_json(capsys, "--demo", "--max-per-namespace", "5")
    assert code == 0, err
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert nodes["demo-06"]["overBefore"] and not nodes["demo-06"]["overAfter"]
    assert not any(n["overAfter"] for n in doc["nodes"])
    assert any(m["from"] == "demo-06" and m["reason"] == "risk" for m in doc["moves"])
    assert 0 < len(doc["moves"]) <= 5
    assert sum(n["inUseAfter"] for n in doc["nodes"]) < sum(n["inUseBefore"] for n in doc["nodes"])  # binpack gain


def test_snapshot_file_with_owner_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KSO_PLAN_POLICY", raising=False)
    items: list[dict[str, Any]] = [{"kind": "Node", "apiVersion": "v1", **node("n1", 7900)},
                                   {"kind": "Node", "apiVersion": "v1", **node("n2", 500)}]
    items += [{"kind": "Pod", "apiVersion": "v1", **pod(f"web-{i}", "n1")} for i in range(3)]
    items += [{"kind": "Pod", "apiVersion": "v1", **pod("solo-0", "n1", owner=("ReplicaSet", "solo"))},
              {"kind": "Pod", "apiVersion": "v1", **pod("solo-1", "n1", owner=("ReplicaSet", "solo"))},
              {"kind": "ReplicaSet", "apiVersion": "apps/v1", "metadata": {"name": "solo", "namespace": "team-a"},
               "spec": {"replicas": 1}}]  # the owner object wins over the pod count (2 pods, e.g. mid-rollout)
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    code, doc, err = run_json(capsys, "--snapshot", str(path), "--policy", "none")
    assert code == 0, err
    assert doc["candidates"] == 3 and doc["notMovable"] == {"single replica": 2}
    assert {m["pod"] for m in doc["moves"]} <= MOVABLE and doc["moves"]
    assert not any(n["overAfter"] for n in doc["nodes"])


def test_trace_forecasts_are_used_not_dropped_as_old(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace's clock is its own: its forecasts must be judged fresh at the trace's "now", or the node
    annotations would silently be used instead."""
    monkeypatch.delenv("KSO_PLAN_POLICY", raising=False)
    code, by_annotations, err = run_json(capsys, "--demo", "--policy", "none")
    assert code == 0, err
    code, by_trace, err = run_json(capsys, "--demo", "--policy", "none", "--trace", "embedded")
    assert code == 0, err
    assert "synthetic join" in by_trace["loadFrom"]
    before = {n["name"]: n["meanBefore"]["cpu"] for n in by_annotations["nodes"]}
    changed = [n["name"] for n in by_trace["nodes"] if abs(n["meanBefore"]["cpu"] - before[n["name"]]) > 1e-6]
    assert len(changed) == len(before), changed


@pytest.mark.parametrize("args", [["--demo", "--execute"], ["--demo", "--max-moves", "-1"],
                                  ["--demo", "--move-cost", "nan"], ["--snapshot", "/no/such/file"]])
def test_config_errors_exit_1(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *args)
    assert code == EXIT_CONFIG == 1 and err.startswith("kso reoptimize: ")


def test_unreachable_api_server_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(f"""
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: ctx, context: {{cluster: c, user: u}}}}]
current-context: ctx
""")
    code, out, err = run(capsys, "--kubeconfig", str(path))
    assert code == EXIT_CONFIG and "cannot list nodes and pods" in err


def test_help_names_the_flags_the_cronjob_uses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["reoptimize", "--help"])
    text = capsys.readouterr().out
    for flag in ("--execute", "--max-moves", "--max-per-node", "--max-per-namespace", "--exclude-namespaces",
                 "--snapshot", "--demo", "--prometheus", "--trace", "--plan-namespace", "kso.io/evict"):
        assert flag in text, flag


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("where", ["env", "config"])
def test_the_settings_prometheus_is_used_without_a_flag_and_a_failure_is_an_error(
        where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """KSO_PROMETHEUS_URL (as the CronJob gets it from kso-settings, or in --config) is the load source when no flag
    names one, as in kso extender; one that does not answer is an error (one line, exit 1), not moves computed on the
    annotations; KSO_FORECAST_SOURCE=NONE runs without it."""
    url = f"http://127.0.0.1:{_closed_port()}"
    for name in ("KSO_PROMETHEUS_URL", "KSO_FORECAST_SOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KSO_PROMETHEUS_RETRIES", "0")
    extra: list[str] = []
    if where == "env":
        monkeypatch.setenv("KSO_PROMETHEUS_URL", url)
    else:
        (tmp_path / "kso.yaml").write_text(f"KSO_PROMETHEUS_URL: {url}\n")
        extra = ["--config", str(tmp_path / "kso.yaml")]
    code, out, err = run(capsys, "--demo", "--policy", "none", *extra)
    assert code == EXIT_CONFIG and url in err and "forecasts failed" in err and "KSO_PROMETHEUS_URL" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    monkeypatch.setenv("KSO_FORECAST_SOURCE", "NONE")
    code, doc, err = run_json(capsys, "--demo", "--policy", "none", *extra)
    assert code == 0 and doc["loadFrom"].startswith("node annotations"), err
    monkeypatch.delenv("KSO_FORECAST_SOURCE")
    # the flag's Prometheus failing is an error, not a fall back
    code, out, err = run(capsys, "--demo", "--prometheus", url)
    assert code == EXIT_CONFIG and "forecasts failed" in err


def test_forecast_source_none_keeps_the_annotations(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSO_PROMETHEUS_URL", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("KSO_FORECAST_SOURCE", "NONE")
    code, doc, err = run_json(capsys, "--demo", "--policy", "none")
    assert code == 0 and "forecasts failed" not in err, err
    assert doc["loadFrom"].startswith("node annotations") and "failed" not in doc["loadFrom"]
