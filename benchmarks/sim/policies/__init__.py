"""Scheduling policies for the replay, by name. Each is a ``benchmarks.sim.engine.Policy``; add one by
writing a module here and one line in ``POLICIES``. ``kso-plan`` (optimizer + extender) is registered
when its module (``kso_plan.py``) exists."""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.sim.engine import Policy
from benchmarks.sim.policies.default import DefaultMostAllocated, DefaultScheduler
from benchmarks.sim.policies.koordinator import LoadAware
from benchmarks.sim.policies.kso_extender import KsoExtenderPolicy, KsoInprocPolicy
from benchmarks.sim.policies.kso_shipped import KsoDefaultPolicy
from benchmarks.sim.policies.oracle import Oracle
from benchmarks.sim.policies.trimaran_lroc import LowRiskOverCommitment
from benchmarks.sim.policies.trimaran_lvrb import LoadVariationRiskBalancing
from benchmarks.sim.policies.trimaran_tlp import TargetLoadPacking

POLICIES: dict[str, Callable[..., Policy]] = {
    "default": DefaultScheduler,
    "default-most": DefaultMostAllocated,
    "trimaran-tlp": TargetLoadPacking,
    "trimaran-lvrb": LoadVariationRiskBalancing,
    "trimaran-lroc": LowRiskOverCommitment,
    "koordinator": LoadAware,
    "kso": KsoDefaultPolicy,  # what deploy/ ships
    "kso-http": KsoExtenderPolicy,
    "kso-inproc": KsoInprocPolicy,
    # a reference point (knows each pod's next-hour usage), not a scheduler: labelled as such in every report
    "oracle": Oracle,
}

try:  # the plan-driven policy lands with the optimizer
    from benchmarks.sim.policies.kso_plan import KsoPlanLoadBalancePolicy, KsoPlanPolicy, KsoPlanReoptimizePolicy
except ImportError:
    pass
else:
    POLICIES["kso-plan"] = KsoPlanPolicy
    POLICIES["kso-plan-lb"] = KsoPlanLoadBalancePolicy
    POLICIES["kso-plan+reopt"] = KsoPlanReoptimizePolicy


def make_policy(name: str, seed: int = 0, **kwargs: object) -> Policy:
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
    return factory(seed=seed, **kwargs)
