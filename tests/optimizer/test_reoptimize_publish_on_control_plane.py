"""``kso reoptimize --execute`` publishes its targets before the first eviction, and marks what happened to
each move afterwards, on the real control plane (the module's own: etcd, kube-apiserver and the
disruption controller of kube-controller-manager, as in test_reoptimize_cli_on_control_plane.py).

The kill is real: the command runs in its own process, and that process SIGKILLs itself right after the
API server accepted its first eviction (no ``finally``, no atexit: what a CronJob deadline or the OOM
killer leaves behind)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from optimizer.plan.placement_plan import PlacementPlan
from optimizer.reoptimize import eviction
from tests.optimizer import test_reoptimize_cli_on_control_plane as on_control_plane
from tests.optimizer.test_reoptimize_cli_on_control_plane import Cluster, evicted, run, run_json

# That module's control plane fixtures (a control plane of this module's own, an empty cluster per test).
control_plane_with_disruption = on_control_plane.control_plane_with_disruption
cluster = on_control_plane.cluster

ROOT = Path(__file__).resolve().parents[2]

# The command with its eviction wrapped: the process kills itself once the API server accepted one.
KILLED_AFTER_FIRST_EVICTION = """
import os, signal, sys
from optimizer.reoptimize import eviction

real_evict = eviction.evict

def evict_then_die(core, move):
    result = real_evict(core, move)
    if result[0]:
        os.kill(os.getpid(), signal.SIGKILL)
    return result

eviction.evict = evict_then_die
from kso.cli import main
sys.exit(main(sys.argv[1:]))
"""


def plan_of(cm: object) -> PlacementPlan:
    return PlacementPlan.from_json(cm.data["plan.json"])  # type: ignore[attr-defined]


def slots(plan: PlacementPlan) -> Counter[str]:
    return Counter({n: k for c in plan.classes.values() for n, k in c.slots.items()})


def test_run_killed_after_its_first_eviction_leaves_the_targets(cluster: Cluster) -> None:
    cluster.seed(never=False)
    env = {k: v for k, v in os.environ.items() if k not in ("KSO_PLAN_FILE", "KSO_PLAN_POLICY")}
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_FIRST_EVICTION, "reoptimize", "--execute", "--policy", "none",
         "--workers", "1", "--time-limit", "10", "--plan-namespace", "kso-test",
         "--kubeconfig", str(cluster.cp.kubeconfig)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)
    gone = [f"team-a/web-{i}" for i in range(4) if cluster.gone(f"team-a/web-{i}")]
    assert len(gone) == 1, gone  # killed right after the first eviction
    cms = cluster.config_maps()
    assert list(cms) == ["kso-test/kso-plan"], "the run was killed after an eviction and left no plan"
    moves = json.loads(cms["kso-test/kso-plan"].data["moves.json"])
    assert moves["phase"] == "evicting" and len(moves["moves"]) >= 2
    assert all(m["state"] == "pending" for m in moves["moves"])
    assert gone[0] in {f"{m['namespace']}/{m['pod']}" for m in moves["moves"]}
    # The plan holds the target of every move, the evicted pod's among them.
    assert slots(plan_of(cms["kso-test/kso-plan"])) == Counter(m["to"] for m in moves["moves"])
    assert set(slots(plan_of(cms["kso-test/kso-plan"]))) <= {"n2", "n3"}


def test_after_the_evictions_the_plan_holds_only_the_moves_carried_out(
        cluster: Cluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.seed(never=False)
    real_evict = eviction.evict

    def budget_arrives_after_the_first_eviction(core: object, move: object) -> tuple[bool, int | None, str]:
        """Someone adds a budget while the run evicts (it read none): every later eviction is refused."""
        result = real_evict(core, move)
        if result[0] and not cluster.policy.list_namespaced_pod_disruption_budget("team-a").items:
            cluster.policy.create_namespaced_pod_disruption_budget("team-a", {"metadata": {"name": "late-pdb"}, "spec": {
                "minAvailable": 4, "selector": {"matchLabels": {"app": "web"}}}})
        return result

    monkeypatch.setattr(eviction, "evict", budget_arrives_after_the_first_eviction)
    code, doc, err = run_json(cluster, capsys, "--execute", "--policy", "none", "--plan-namespace", "kso-test",
                              "--eviction-deadline", "0")
    done = evicted(doc)
    assert code == 2 and len(done) == 1 and len(doc["moves"]) >= 2, doc["evictions"]
    cm = cluster.config_maps()["kso-test/kso-plan"]
    moves = json.loads(cm.data["moves.json"])
    assert moves["phase"] == "done"
    states = {f"{m['namespace']}/{m['pod']}": m["state"] for m in moves["moves"]}
    assert set(states) == {f"{m['namespace']}/{m['pod']}" for m in doc["moves"]}
    assert states[done[0]] == "evicted"
    refused = [m for m in moves["moves"] if m["state"] == "refused"]
    assert len(refused) == len(doc["moves"]) - 1 and all("429" in m["detail"] for m in refused)
    target = next(m["to"] for m in moves["moves"] if m["state"] == "evicted")
    assert slots(plan_of(cm)) == Counter({target: 1})  # only the eviction that happened keeps a slot


def test_plan_that_cannot_be_published_stops_the_evictions(cluster: Cluster,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    cluster.seed(never=False)
    code, out, err = run(cluster, capsys, "--execute", "--plan-namespace", "no-such-ns")
    assert code == 1, (out, err)
    assert "no-such-ns" in err and "404" in err and "nothing was evicted" in err
    assert not any(cluster.gone(f"team-a/web-{i}") for i in range(4))
    assert cluster.events() == []
