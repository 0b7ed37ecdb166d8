"""py-spy around a cell, and where the samples went (by stage and by function)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def py_spy(pid: int, out: Path | None, rate: int = 500) -> Iterator[None]:
    if out is None:
        yield
        return
    exe = shutil.which("py-spy")
    if exe is None:
        print("  (py-spy not found: pip install py-spy)")
        yield
        return
    proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                             "--output", str(out), "--nonblocking", "--gil"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if not out.exists():
            print(f"  (py-spy wrote nothing: {err.decode(errors='replace')[-300:]})")


CATEGORIES = (
    ("JSON parse (orjson.loads)", ("loads (extender/protocol.py", "loads (orjson", "parse_extender_args")),
    ("pod parse (pod_from_k8s)", ("pod_from_k8s", "parse_pod")),
    ("resolve full nodes (knows/lock)", ("resolve (extender/service.py",)),
    ("NodeView gather (ClusterState.view)", ("view (kso/core/cluster.py",)),
    ("agents", ("extender/agents/",)),
    ("filter/prioritize bookkeeping", ("_judge (extender", "_scores (extender", "filter (extender/service.py",
                                       "prioritize (extender/service.py")),
    ("response encode (orjson.dumps)", ("dumps (extender/protocol.py",)),
    ("body read (request.stream)", ("read_body (extender/app.py",)),
    ("metrics (prometheus_client)", ("prometheus_client",)),
)


def summarize_profile(path: Path, top: int = 14) -> list[str]:
    """Top functions (self and inclusive share of samples) and a breakdown by stage, from py-spy raw output."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    cats: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n_s = line.rpartition(" ")
        if not stack or not n_s.isdigit():
            continue
        n = int(n_s)
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        total += n
        self_c[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
        best, depth = "other (event loop, Starlette/FastAPI routing, uvicorn/httptools)", -1
        for cat, needles in CATEGORIES:
            for d, f in enumerate(frames):
                if any(nd in f for nd in needles) and d > depth:
                    best, depth = cat, d
        cats[best] += n
    if not total:
        return ["  (no samples)"]
    out = [f"  {total} samples; by stage (innermost kso stage on the stack):"]
    out += [f"    {100 * c / total:5.1f}%  {cat}" for cat, c in cats.most_common()]
    out.append("  top functions by self time:")
    out += [f"    {100 * c / total:5.1f}%  {f[:150]}" for f, c in self_c.most_common(top)]
    out.append("  top kso/starlette/uvicorn functions by inclusive time:")
    keep = [(f, c) for f, c in incl.most_common() if any(k in f for k in ("extender/", "kso/", "starlette/", "fastapi/",
                                                                           "uvicorn/", "prometheus_client/"))]
    out += [f"    {100 * c / total:5.1f}%  {f[:150]}" for f, c in keep[:top]]
    return out
