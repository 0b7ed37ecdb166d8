"""forecasting.cli: ``kso forecast`` (a table or JSON per node), ``kso annotate`` (kube-safe-scheduler's annotations
from forecasts, dry-run from a snapshot), and ``kso annotate --cost`` (prices from a user's file by node name or
instance type, --random only on request, the same dry-run / apply convention; applied on the real control plane)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client

from forecasting.cli import main as cli_main
from forecasting.forecast_source import check_prometheus_url
from kso.cli import main as kso_main
from kso.core.cluster_source import InputError
from kso.core.net import free_port
from kso.core.node_costs import SEED_PRICES, PriceFileError, load_prices
from tests.support.fixtures import make_node

ROOT = Path(__file__).resolve().parents[2]  # the checkout under test (cwd first on sys.path)


def _snapshot(tmp_path: Path, nodes: list[dict[str, Any]]) -> str:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"nodes": nodes, "pods": []}))
    return str(path)


def _typed(name: str, instance_type: str | None) -> dict[str, Any]:
    node = make_node(name)
    if instance_type:
        node["metadata"]["labels"]["node.kubernetes.io/instance-type"] = instance_type
    return node


def _patches(out: str) -> dict[str, str]:
    return {p["node"]: p["patch"]["metadata"]["annotations"]["hightower.com/cost"]
            for p in map(json.loads, out.strip().splitlines())}


def test_prices_by_name_then_instance_type_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("m5.large: 0.096\nc5.xlarge: '0.17'\nspecial-node: 0.01\n")
    snap = _snapshot(tmp_path, [_typed("a", "m5.large"), _typed("special-node", "m5.large"), _typed("b", "c5.xlarge"),
                                _typed("c", "unknown.type"), _typed("d", None)])
    assert kso_main(["annotate", "--cost", str(prices), "--snapshot", snap]) == 0
    out = capsys.readouterr()
    assert _patches(out.out) == {"a": "0.096", "special-node": "0.01", "b": "0.17"}
    assert "# c: no price" in out.err and "unknown.type" in out.err and "# d: no price" in out.err


def test_csv_price_file_and_a_custom_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text("pool,price\nspot,0.02\nondemand,0.09\n")
    a, b = make_node("a"), make_node("b")
    a["metadata"]["labels"]["pool"], b["metadata"]["labels"]["pool"] = "spot", "ondemand"
    assert kso_main(["annotate", "--cost", str(prices), "--cost-label", "pool", "--snapshot", _snapshot(tmp_path, [a, b])]) == 0
    assert _patches(capsys.readouterr().out) == {"a": "0.02", "b": "0.09"}


@pytest.mark.parametrize("text, suffix, message", [("a: -1\n", ".yaml", "must be a finite number >= 0"),
                                                  ("a: cheap\n", ".yaml", "is not a number"),
                                                  ("a,1,2\n", ".csv", "expected 'key,price'"),
                                                  ("", ".csv", "no prices")])
def test_bad_price_files_say_what_is_wrong(tmp_path: Path, text: str, suffix: str, message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"prices{suffix}"
    path.write_text(text)
    with pytest.raises(PriceFileError, match=message):
        load_prices(path)
    assert kso_main(["annotate", "--cost", str(path), "--snapshot", _snapshot(tmp_path, [make_node("a")])]) == 2
    assert message in capsys.readouterr().err


def test_random_is_explicit_and_uses_the_seed_price_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = _snapshot(tmp_path, [make_node(f"n{i}") for i in range(20)])
    assert kso_main(["annotate", "--random", "--seed", "3", "--snapshot", snap]) == 0
    first = _patches(capsys.readouterr().out)
    assert len(first) == 20 and set(first.values()) <= set(SEED_PRICES)
    assert kso_main(["annotate", "--random", "--seed", "3", "--snapshot", snap]) == 0
    assert _patches(capsys.readouterr().out) == first
    assert kso_main(["annotate", "--random", "--cost", "x.yaml", "--snapshot", snap]) == 2


def test_applied_on_the_real_api_server(control_plane: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    core = client.CoreV1Api(control_plane.api_client())
    names = [f"cost-{tmp_path.name[-12:].lower().replace('_', '-')}-{i}" for i in range(2)]
    for name, itype in zip(names, ("m5.large", "c5.xlarge"), strict=True):
        node = _typed(name, itype)
        node["metadata"].pop("resourceVersion")
        core.create_node(node)
    try:
        prices = tmp_path / "prices.json"
        prices.write_text(json.dumps({"m5.large": 0.096, "c5.xlarge": 0.17}))
        monkeypatch.setenv("KSO_PLAN_COST_KEY", "example.com/hourly-price")
        assert kso_main(["annotate", "--cost", str(prices), "--kubeconfig", str(control_plane.kubeconfig)]) == 0
        assert "annotated 2 of" in capsys.readouterr().out
        got = [core.read_node(n).metadata.annotations.get("example.com/hourly-price") for n in names]
        assert got == ["0.096", "0.17"]
    finally:
        for name in names:
            core.delete_node(name)


def test_cli_forecast_from_embedded_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["forecast", "--trace", "embedded", "--nodes", "3", "--model", "last-value", "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["source"] == "trace:embedded" and doc["error"] is None
    assert [n["node"] for n in doc["nodes"]] == ["vm-001", "vm-002", "vm-003"]
    cpu = doc["nodes"][0]["cpu"]
    assert cpu["model"] == "last-value" and 0 <= cpu["mean"] <= cpu["p95"] and cpu["age_s"] < 3600
    assert cli_main(["forecast", "--trace", "embedded", "--nodes", "2", "--model", "last-value"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:3] == ["NODE", "CPU", "MEAN"] and table[2].startswith("vm-001")


def test_cli_annotate_dry_run_from_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = tmp_path / "cluster.json"
    snap.write_bytes(orjson.dumps({"nodes": [make_node("node-a", cpu="2", memory="8Gi"),
                                             make_node("node-b", cpu="4", memory="16Gi")]}))
    rc = cli_main(["annotate", "--trace", "embedded", "--nodes", "2", "--model", "last-value", "--snapshot",
                   str(snap), "--assign-traces", "--dry-run"])
    assert rc == 0
    lines = [orjson.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["node"] for x in lines] == ["node-a", "node-b"]
    ann = lines[0]["patch"]["metadata"]["annotations"]
    assert set(ann) >= {"mean-free-cpu", "std-free-cpu", "mean-free-memory", "std-free-memory",
                        "forcasted-free-cpu", "forcasted-free-memory"}
    assert ann["kso.io/forecast-source"] == "synthetic:trace:embedded:vm-001"
    assert 0 <= float(ann["mean-free-cpu"]) <= 2000 and 0 <= float(ann["mean-free-memory"]) <= 8192


def kso(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m kso.cli ARGV`` of this checkout in its own process: what a terminal sees, logging included."""
    return subprocess.run([sys.executable, "-m", "kso.cli", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_forecast_from_a_prometheus_that_fails_says_so_once() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # a real closed port
    proc = kso("forecast", "--prometheus", url)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"kso forecast: Prometheus {url}: cannot connect (Connection refused)"]


def test_a_prometheus_url_without_its_scheme_gets_a_hint() -> None:
    proc = kso("forecast", "--prometheus", "localhost:9090")
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "'localhost:9090' is not an http:// or https:// URL; did you mean http://localhost:9090?" in proc.stderr
    with pytest.raises(InputError, match="did you mean http://prometheus.monitoring:9090"):
        check_prometheus_url("prometheus.monitoring:9090")
    check_prometheus_url("https://prometheus.example/prom")  # a path prefix is fine
