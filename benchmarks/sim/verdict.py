"""A report's first lines, computed from its own cells: the verdict (kso's headline configurations against
kube-scheduler's default scoring, LeastAllocated and MostAllocated, on every harm), what each policy name means,
whether kso's U* sweep is monotone (and, where it is not, why), and one plain sentence when the policies do not
differ on the replayed history. Nothing here is written in: every number is a cell's mean."""

from __future__ import annotations

import math
from collections.abc import Sequence

from benchmarks.sim.bench_report import ACTUAL, NAN3, Agg, PoolShort, is_kso, is_oracle
from benchmarks.sim.runner import parse_spec

# What each policy name in a report stands for, shown where the names first appear.
POLICY_MEANINGS = {
    "default": "kube-scheduler's default profile, NodeResourcesFit LeastAllocated: spreads pods by their requests",
    "default-most": "kube-scheduler's default profile with NodeResourcesFit MostAllocated: packs pods by their requests",
    "trimaran-tlp": "Trimaran TargetLoadPacking: packs nodes by measured cpu up to its `target` %",
    "trimaran-lvrb": "Trimaran LoadVariationRiskBalancing: balances mean + variance of measured load",
    "trimaran-lroc": "Trimaran LowRiskOverCommitment: scores the risk of overcommitting limits",
    "koordinator": "Koordinator LoadAware: filters out nodes whose measured cpu is above `cpu_threshold` %",
    "kso": "kso as deploy/ ships it (the extender, its shipped settings)",
    "kso-http": "kube-scheduler's default profile + the kso extender over HTTP",
    "kso-inproc": ("kube-scheduler's default profile + the kso extender (safe-overload filter and scores on each "
                   "node's measured load), called in-process; `SAFEUTILIZATION` = its U*, the utilisation a node "
                   "should stay under"),
    "kso-plan": "the kso extender following kso's CP-SAT placement plan for the pending pods (re-solved as pods come)",
    "kso-plan[load-balance]": "kso-plan with the load-balance objective",
    "kso-plan+reopt": "kso-plan + `kso reoptimize` moving running pods",
    ACTUAL: ("what the cluster actually ran, measured on its history: its nodes' node-hours, node-time above U*, "
                  "OOM kills (restarts whose last termination was OOMKilled); pods never served and latency: n/a"),
    "oracle": ("a reference, not a scheduler anyone could run: knows each pod's usage over the next hour and packs so "
               "that no node passes U*"),
}
LEAST, MOST = "default", "default-most"
SHIPPED_U_STAR = "90"  # kso's U* default (SafeBoundSettings.utilization): the sweep point the verdict quotes
# (metric, label, digits): the harms the verdict carries, in its order
VERDICT_HARMS = (("overloaded_node_hours", "overloaded node-hours", 1), ("pods_oom_killed", "pods OOM-killed", 0),
                 ("pods_never_served", "pods never served", 0), ("start_latency_p99_s", "p99 start latency (s)", 0))
COST = ("provisioned_node_hours", "node-hours", 1)
SAME = (COST, *VERDICT_HARMS)


def _name(policy: str) -> str:
    return parse_spec(policy)[0]


def glossary_lines(policies: Sequence[str]) -> list[str]:
    """One line per policy name the report uses (a knob point shares its name's line)."""
    names = list(dict.fromkeys(_name(p) for p in policies))
    return [f"  - `{n}`: {POLICY_MEANINGS.get(n, 'see benchmarks/sim/policies/')}" for n in names]


def _mean(agg: Agg, scenario: str, policy: str, key: str) -> float:
    return agg.get((scenario, policy), {}).get(key, NAN3)[0]


def headline_kso(agg: Agg, scenario: str) -> list[str]:
    """The kso configurations the verdict quotes: as shipped, plan-driven, and the extender at its default U*
    (any kso configuration when none of those ran)."""
    have = [p for (s, p) in agg if s == scenario and is_kso(p)]
    picked = [p for p in have if p in ("kso", "kso-plan")]
    picked += [p for p in have if _name(p) == "kso-inproc"
               and (parse_spec(p)[1].get("env") or {}).get("SAFEUTILIZATION", SHIPPED_U_STAR) == SHIPPED_U_STAR]
    return sorted(picked) or sorted(have)[:1]


def _versus(mine: float, ref: float, digits: int) -> str:
    return f"{mine:.{digits}f} vs {ref:.{digits}f}"


def _cost_change(mine: float, ref: float, label: str) -> str:
    if not (math.isfinite(mine) and math.isfinite(ref)) or ref == 0:
        return f"{mine:.1f} node-hours against {ref:.1f} for {label}"
    change = mine / ref - 1.0
    if abs(change) < 0.0005:
        return f"the same node-hours as {label} ({mine:.1f} vs {ref:.1f})"
    return f"{abs(change):.1%} {'fewer' if change < 0 else 'more'} node-hours than {label} ({mine:.1f} vs {ref:.1f})"


def _against(agg: Agg, scenario: str, policy: str, ref: str, label: str) -> str:
    parts = [_cost_change(_mean(agg, scenario, policy, COST[0]), _mean(agg, scenario, ref, COST[0]), label)]
    for key, harm, digits in VERDICT_HARMS:
        mine, theirs = _mean(agg, scenario, policy, key), _mean(agg, scenario, ref, key)
        if math.isfinite(mine) and math.isfinite(theirs):
            parts.append(f"{harm} {_versus(mine, theirs, digits)}")
    return ", ".join(parts)


def no_difference(agg: Agg, scenario: str) -> str | None:
    """The plain sentence when every runnable policy gives the same cost and harms (as printed), else None."""
    runnable = [p for (s, p) in agg if s == scenario and not is_oracle(p) and p != ACTUAL]
    if len(runnable) < 2:
        return None
    shown = {p: tuple(f"{_mean(agg, scenario, p, k):.{d}f}" for k, _, d in SAME) for p in runnable}
    if len(set(shown.values())) > 1:
        return None
    values = ", ".join(f"{v} {label}" for v, (_, label, _) in zip(next(iter(shown.values())), SAME, strict=True))
    return (f"**No difference on this history**: all {len(runnable)} policies give {values}. Where they would place "
            "pods differently, this history never made it matter (e.g. every pod fits wherever it goes and no node "
            "nears U*); the Pareto statements are left out.")


def verdict_lines(agg: Agg, scenario: str) -> list[str]:
    """The verdict: each headline kso configuration against LeastAllocated, MostAllocated and (a history replay) what
    the cluster actually ran, every harm."""
    actual = [(ACTUAL, f"what the cluster ran (`{ACTUAL}`)")] if (scenario, ACTUAL) in agg else []
    kso = headline_kso(agg, scenario)
    if (sentence := no_difference(agg, scenario)) is not None:
        return [f"- {sentence}"] + [f"- against what the cluster ran, `{p}` uses "
                                    + _against(agg, scenario, p, r, label) for p in kso[:1] for r, label in actual]
    refs = [(r, label) for r, label in ((LEAST, f"LeastAllocated (`{LEAST}`)"), (MOST, f"MostAllocated (`{MOST}`)"))
            if (scenario, r) in agg] + actual
    if not kso or not refs:
        return ["- verdict: n/a (the run has no kso configuration or no default-scheduler row to compare with)"]
    return [f"- on this data `{p}` uses " + "; ".join(_against(agg, scenario, p, r, label) for r, label in refs)
            for p in kso]


def _knob_points(agg: Agg, scenario: str) -> list[tuple[float, str]]:
    out = []
    for (s, p) in agg:
        u = (parse_spec(p)[1].get("env") or {}).get("SAFEUTILIZATION") if s == scenario else None
        if u is not None:
            out.append((float(u), p))
    return sorted(out)


def sweep_lines(agg: Agg, scenario: str, pool_short: PoolShort | None = None) -> list[str]:
    """Whether kso's U* sweep is monotone (a lower U* never more overload or OOM kills); where not, which rows and,
    when the fluid bound shows it, why: at that U* the whole pool cannot keep demand under it."""
    points = _knob_points(agg, scenario)
    if len(points) < 2:
        return []
    worse: list[tuple[float, float, str]] = []
    for i, (u_lo, p_lo) in enumerate(points):
        for u_hi, p_hi in points[i + 1:]:
            for key, label, digits in VERDICT_HARMS[:2]:
                lo, hi = _mean(agg, scenario, p_lo, key), _mean(agg, scenario, p_hi, key)
                if round(lo, digits) > round(hi, digits):
                    worse.append((u_lo, u_hi, f"{label} {lo:.{digits}f} at U* {u_lo:g}% > {hi:.{digits}f} at {u_hi:g}%"))
    if not worse:
        return [f"- kso's U* sweep ({', '.join(f'{u:g}%' for u, _ in points)}) is monotone: a lower U* never gave more "
                "overloaded node-hours or pods OOM-killed"]
    lows = sorted({u for u, _, _ in worse})
    out = [f"- kso's U* sweep is **not monotone**: {'; '.join(w for _, _, w in worse[:4])}"
           + (f" (and {len(worse) - 4} more)" if len(worse) > 4 else "")]
    shorts = {u: pool_short(u / 100.0) for u in lows} if pool_short else {}
    short = {u: v for u, v in shorts.items() if v[0] > 0}
    if short:
        never = ", ".join(f"{_mean(agg, scenario, p, 'pods_never_served'):.0f} at {u:g}%" for u, p in points if u in short)
        out.append("  - why: at " + "; at ".join(f"U* {u:g}% the whole pool cannot keep {res} demand under U* in {n} of "
                                              f"{total} scored steps" for u, (n, total, res) in short.items())
                   + " (fluid bound, benchmarks/sim/bound.py). There kso refuses pods on every node; a pod held "
                   "KSO_SAFE_MAX_HOLD_S (300 s) is then passed to the least-risk nodes, which run over (without the "
                   "capacity signal the autoscaler does not see the refusals): held pods are never served "
                   f"({never}) or land late on hot nodes. A U* below what the pool can hold buys no safety.")
    unexplained = [u for u in lows if u not in short]
    if unexplained:
        out.append(f"  - at U* {', '.join(f'{u:g}%' for u in unexplained)} the pool could hold the demand under U* at "
                   "every step: not explained by the pool's size (a single seed's noise or the extender's scores; "
                   "see the Harm table)")
    return out
