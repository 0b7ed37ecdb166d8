"""``kso``: the configuration kso ships, what ``kubectl apply -k deploy/`` runs (deploy/settings.yaml), replayed
in-process (the same decisions as over HTTP: ``kso-http``).

It is kso's default agents, weights and safe bound (U* 90%, eps 30%) with the statistics of its default forecaster,
see before you pack (KSO_PACK_UNSEEN_MAX) and the capacity signal on (KSO_CAPACITY_SIGNAL: placeholder pods for
the demand kso refuses, so the cluster-autoscaler sees it); node marks (KSO_CAPACITY_KEEP_NODES) stay off. Each
choice was measured on tuning seeds the README's table does not report (benchmarks/figures/shipped-default.md).
tests/deploy/test_shipped_default.py checks that deploy/settings.yaml and SHIPPED agree, so the replay's ``kso``
row is what a user installs.
"""

from __future__ import annotations

from typing import Any

from benchmarks.sim.policies.kso_extender import KsoInprocPolicy

# The replay's knobs for deploy/settings.yaml's capacity settings: KSO_CAPACITY_SIGNAL -> capacity,
# KSO_CAPACITY_KEEP_NODES -> mark; SHIPPED_ENV: the kso settings deploy/ sets to other than their defaults
# (none: its other values are the code's defaults, the capacity signal aside).
SHIPPED = {"capacity": "placeholder", "mark": "none"}
SHIPPED_ENV: dict[str, str] = {}


class KsoDefaultPolicy(KsoInprocPolicy):
    """``kso``: what deploy/ ships (above); a spec's own knobs override it (``kso:capacity=none`` is the code's
    defaults: ``kso extender`` run outside deploy/)."""

    name = "kso"
    mode = "kso as deploy/ ships it, in-process (extender.verbs.Extender called directly)"

    def __init__(self, seed: int = 0, **kw: Any) -> None:
        for knob, value in SHIPPED.items():
            kw.setdefault(knob, value)
        env = {**SHIPPED_ENV, **(kw.pop("env", None) or {})}
        super().__init__(seed, env=env or None, **kw)
