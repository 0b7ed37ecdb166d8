"""optimizer.reoptimize.eviction against the one fault the real API server cannot produce on demand: an
eviction answered 404, 409 or 500 for chosen pods (the stand-in API server, tests/support/kube_standin.py, with
the real kubernetes client). Evictions, PodDisruptionBudgets and publishing on the real control plane:
test_reoptimize_cli_on_control_plane.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

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
