"""optimizer.reoptimize.eviction against the one fault the real API server cannot produce on demand: an
eviction answered 404, 409 or 500 for chosen pods (the stand-in API server, tests/support/kube_standin.py, with
the real kubernetes client). Evictions, PodDisruptionBudgets and publishing on the real control plane:
test_reoptimize_cli_on_control_plane.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from optimizer.plan.placement_plan import PlacementPlan
from optimizer.reoptimize import eviction
from tests.optimizer.reoptimize_cluster import run_json, seed
from tests.support.kube_standin import StandinApiServer


@pytest.fixture
def server() -> Iterator[StandinApiServer]:
    with StandinApiServer() as srv:
        yield srv


@pytest.fixture
def kubeconfig(server: StandinApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = server.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setattr(eviction, "SA_NAMESPACE_FILE", str(tmp_path / "no-such-namespace-file"))
    for var in ("KSO_PLAN_FILE", "KSO_PLAN_POLICY", "SAFEUTILIZATION", "SAFEPERCENTILE"):
        monkeypatch.delenv(var, raising=False)
    return str(path)



@pytest.mark.parametrize("status", [404, 409, 500])
def test_other_eviction_failures_are_reported_once(status: int, server: StandinApiServer, kubeconfig: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    seed(server, never=False)
    for i in range(3):
        server.fail_evictions[f"team-a/web-{i}"] = status
    code, doc, err = run_json(capsys, "--kubeconfig", kubeconfig, "--execute")
    assert code == 2 and doc["moves"]
    assert Counter((ns, n) for ns, n, _ in server.evictions).most_common(1)[0][1] == 1
    assert all(e["status"] == status for e in doc["evictions"])
    assert f"{status}" in err


def test_a_plan_too_large_for_the_configmap_in_full_is_published_without_the_nodes_loads(
        server: StandinApiServer, kubeconfig: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The nodes' loads (what a checker recomputes the risks from) are most of a plan's bytes: where the whole plan
    would overflow the ConfigMap (a large cluster), the ConfigMap gets what the extender follows and the plan file
    the whole plan, instead of nothing being published and nothing evicted."""
    seed(server, never=False)
    code, dry, err = run_json(capsys, "--kubeconfig", kubeconfig)
    assert code == 0 and dry["moves"], err
    full = len(orjson.dumps(dry["plan"]))
    compact = len(orjson.dumps(eviction.without_node_loads(dry["plan"])))
    assert compact < full
    monkeypatch.setattr(eviction, "CONFIGMAP_LIMIT", (full + compact) // 2)  # the moves' states are far smaller
    plan_file = tmp_path / "plan.json"
    monkeypatch.setenv("KSO_PLAN_FILE", str(plan_file))
    code, doc, err = run_json(capsys, "--kubeconfig", kubeconfig, "--execute")
    assert code == 0 and not doc["errors"], err
    assert any("without the nodes' loads" in p for p in doc["published"]), doc["published"]
    [cm] = server.objects("configmaps")
    published = PlacementPlan.from_json(cm["data"]["plan.json"])
    on_file = PlacementPlan.from_json(plan_file.read_bytes())
    assert published.plan_id == on_file.plan_id and published.classes.keys() == on_file.classes.keys()
    assert {n: i.risk for n, i in published.nodes.items()} == {n: i.risk for n, i in on_file.nodes.items()}
    assert not any(i.before or i.capacity for i in published.nodes.values())
    assert all(i.before and i.capacity for i in on_file.nodes.values())
