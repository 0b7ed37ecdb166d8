"""``kso shadow --records FILE``: one JSON line per judged bind, for audit by users and tools. A line is written once
the bind's outcome is read (or at once, without Prometheus; or at the end, still pending): the pod and its requests,
the node the cluster's scheduler chose, kso's pick, both risks, scores and kso's reasons, and both nodes' outcomes."""

from __future__ import annotations

import json
import logging
import math
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from shadow.judge import NodeOutcome, Record

log = logging.getLogger("kso.shadow")

FORMAT = 1  # the lines' format, written in each line ("format"): a reader can check it


def _clean(value: Any) -> Any:
    """``value`` with every non-finite float as null (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _outcome(o: NodeOutcome | None, u_star: float) -> dict[str, Any] | None:
    if o is None:
        return None
    return {"peak_cpu": o.peak_cpu, "peak_memory": o.peak_memory, "peak": o.peak,
            "kso_extra_share": None if o.pod_share is None else list(o.pod_share), "peak_with_kso": o.with_pod,
            "over_u_star": o.over(u_star), "oom_kills": o.oom_kills, "oom_kills_new": o.oom_new,
            "throttled_share": o.throttled, "pod_measured": o.pod_measured}


def as_json(r: Record, u_star: float, status: str) -> dict[str, Any]:
    """``r`` as a JSON object; ``status``: read (outcomes read), pending (not read yet), no_outcomes (no Prometheus)."""
    return _clean({
        "format": FORMAT, "status": status, "uid": r.uid, "pod": r.pod, "scheduler": r.scheduler,
        "requests": {"cpu_m": r.cpu_m, "memory_mb": r.memory_mb},
        "usage": None if r.pod_usage is None else {"cpu_m": r.pod_usage[0], "memory_mb": r.pod_usage[1]},
        "bound_at": datetime.fromtimestamp(r.at, UTC).isoformat(timespec="milliseconds"), "bound_at_unix": r.at,
        "chosen": r.chosen, "kso_pick": r.pick, "kind": r.kind, "warned": r.warned, "unknown_node": r.unknown_node,
        "reasons": r.reasons, "chosen_risk": r.chosen_risk, "pick_risk": r.pick_risk, "chosen_score": r.chosen_score,
        "pick_score": r.pick_score, "u_star": u_star, "late": r.late, "judge_seconds": round(r.seconds, 6),
        "nodes": r.nodes, "fitting": r.fitting, "passing": r.passing,
        "outcomes": {"chosen": _outcome(r.chosen_outcome, u_star), "kso_pick": _outcome(r.pick_outcome, u_star)},
        "missed": r.missed(u_star) if r.pick_outcome is not None else None,
    })


class RecordsFile:
    """Appends JSON lines to ``path`` (created with its folder; opened once, flushed per batch). A write that fails is
    logged once and the file closed: the shadow goes on without it."""

    def __init__(self, path: str, u_star: float) -> None:
        self.path = Path(path)
        self.u_star = u_star
        self.lock = threading.Lock()
        self.written = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file: IO[str] | None = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"--records / KSO_SHADOW_RECORDS {path}: cannot write there ({exc.strerror or exc})") \
                from None

    def write(self, records: list[Record], status: str) -> None:
        if not records:
            return
        text = "".join(json.dumps(as_json(r, self.u_star, status), separators=(",", ":"), allow_nan=False) + "\n"
                       for r in records)
        with self.lock:
            if self.file is None:
                return
            try:
                self.file.write(text)
                self.file.flush()
                self.written += len(records)
            except OSError as exc:
                log.warning("records not written to %s any more: %s", self.path, exc)
                self.file.close()
                self.file = None

    def close(self) -> None:
        with self.lock:
            if self.file is not None:
                self.file.close()
                self.file = None
