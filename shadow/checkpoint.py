"""The shadow's state across a restart (``KSO_SHADOW_STATE``): a JSON file, written atomically with each report and at
exit, read at start. It holds the report's totals (shadow.report.Tally), the binds waiting for their outcome (read
after the restart once their horizon has passed), the latest misses and safety changes, and how far each node's OOM
kills were counted. Not kept: kso's schedule (shadow.counterfactual), which starts again from the cluster as it is;
the Prometheus counters, which restart from 0 as counters do (rate() and increase() read through that)."""

from __future__ import annotations

import json
import logging
import math
import os
from collections import deque
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from shadow.judge import NodeOutcome, Record
from shadow.report import Tally

log = logging.getLogger("kso.shadow")

FORMAT = 1
VERDICTS = {"true": True, "false": False, "unknown_node": None}
VERDICT_NAMES = {v: k for k, v in VERDICTS.items()}
TALLY_NUMBERS = [f.name for f in fields(Tally) if f.type in ("int", "float")]


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def record_from(d: dict[str, Any]) -> Record:
    d = dict(d)
    for key in ("chosen_outcome", "pick_outcome"):
        o = d.get(key)
        if o is not None:
            if o.get("pod_share") is not None:
                o["pod_share"] = tuple(o["pod_share"])
            d[key] = NodeOutcome(**o)
    for key in ("pick_share", "pick_alloc", "pod_usage"):
        if d.get(key) is not None:
            d[key] = tuple(d[key])
    return Record(**d)


def save(path: str, tally: Tally, pending: list[Record], misses: list[Record], changed: list[Record],
         oom_counted: dict[tuple[str, str], float]) -> None:
    """Write the state to ``path`` atomically (a reader, or the next start, never sees half of it)."""
    state = {
        "format": FORMAT,
        "tally": {**{k: getattr(tally, k) for k in TALLY_NUMBERS},
                  "outcomes": [[role, VERDICT_NAMES[w], c] for (role, w), c in tally.outcomes.items()],
                  "oom": tally.oom, "throttled": tally.throttled},
        "pending": [asdict(r) for r in pending], "misses": [asdict(r) for r in misses],
        "changed": [asdict(r) for r in changed],
        "oom_counted": [[role, node, t] for (role, node), t in oom_counted.items()],
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(_finite(state), separators=(",", ":")))
    os.replace(tmp, target)


def load(path: str) -> dict[str, Any] | None:
    """The state saved at ``path``: tally, pending, misses, changed (Records) and oom_counted; None when there is no
    file. A file that does not parse is moved aside (``.bad``) with a warning: the shadow starts afresh rather than
    not at all."""
    target = Path(path)
    if not target.exists():
        return None
    try:
        raw = json.loads(target.read_text())
        if raw.get("format") != FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, not {FORMAT}")
        t = raw["tally"]
        tally = Tally(**{k: t[k] for k in TALLY_NUMBERS if k in t})
        tally.outcomes = {(role, VERDICTS[w]): list(c) for role, w, c in t["outcomes"]}
        tally.oom, tally.throttled = dict(t["oom"]), dict(t["throttled"])
        return {"tally": tally, "pending": deque(record_from(r) for r in raw["pending"]),
                "misses": [record_from(r) for r in raw["misses"]], "changed": [record_from(r) for r in raw["changed"]],
                "oom_counted": {(role, node): float(x) for role, node, x in raw["oom_counted"]}}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        bad = target.with_name(target.name + ".bad")
        log.warning("KSO_SHADOW_STATE %s not read (%s): moved to %s, starting afresh", path,
                    " ".join(str(exc).split())[:200], bad)
        try:
            os.replace(target, bad)
        except OSError:
            pass
        return None
