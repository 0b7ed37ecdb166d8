"""``python -m benchmarks.latency``: the command line."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.latency import __doc__ as USAGE
from benchmarks.latency.compare import run_compare
from benchmarks.latency.matrix import run_matrix
from benchmarks.latency.server import HTTP_TIMEOUT_S
from benchmarks.latency.soak import run_soak
from benchmarks.machine import machine_info


def _csv(kind: type, allowed: Sequence[str] | None = None) -> Any:
    def parse(text: str) -> list[Any]:
        items = [kind(x.strip()) for x in text.split(",") if x.strip()]
        if allowed is not None:
            bad = [x for x in items if x not in allowed]
            if bad:
                raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {','.join(allowed)}")
        return items
    return parse


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=USAGE.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=_csv(int), default=[100, 500, 5000], help="node counts (default 100,500,5000)")
    p.add_argument("--modes", type=_csv(str, ("names", "full")), default=["names", "full"],
                   help="names = NodeNames (nodeCacheCapable), full = Nodes.items")
    p.add_argument("--verbs", type=_csv(str, ("filter", "prioritize")), default=["filter", "prioritize"])
    p.add_argument("--node-sets", type=_csv(str, ("sample", "all")), default=["all", "sample"],
                   help="all = every node; sample = kube-scheduler's feasible-node sample")
    p.add_argument("--requests", type=int, default=3000, help="measured calls per cell (default 3000)")
    p.add_argument("--warmup", type=int, default=200, help="warm-up calls per cell (default 200)")
    p.add_argument("--max-cell-seconds", type=float, default=20.0,
                   help="cap on a cell's measuring time; slow cells (5,000 full nodes) get fewer calls (default 20)")
    p.add_argument("--concurrency", type=int, default=1, help="client processes, one call in flight each (default 1)")
    p.add_argument("--variants", type=int, default=8, help="distinct pending pods / sample windows per cell")
    p.add_argument("--agents", help="KSO_AGENTS for the server (default: the server's default)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--py-spy", metavar="DIR", help="record each cell's server with py-spy (raw stacks) into DIR and "
                                                   "print where the time goes (slows the server a little)")
    p.add_argument("--duration", type=float, help="soak mode: run for this many seconds (the issue asks 600)")
    p.add_argument("--rate", type=float, default=2000.0, help="soak: target calls/s in total (default 2000: twice "
                                                              "1,000/s, alternating filter and prioritize)")
    p.add_argument("--soak-nodes", type=int, default=500)
    p.add_argument("--soak-clients", type=int, default=4, help="soak: client processes (default 4)")
    p.add_argument("--soak-bucket", type=float, default=0.0,
                   help="soak: seconds per reported interval (default 60, or 10 for runs under 5 minutes)")
    p.add_argument("--timeout", type=float, default=HTTP_TIMEOUT_S, help="soak: per-call timeout (default 5 s)")
    p.add_argument("--compare-tree", metavar="DIR", help="before/after: also serve the cluster from the kso checkout DIR "
                                                         "(e.g. a git worktree of the commit before a change) and "
                                                         "measure both trees in alternating rounds")
    p.add_argument("--rounds", type=int, default=6, help="compare: rounds per cell and tree (default 6)")
    p.add_argument("--no-reply-check", action="store_true", help="compare: skip the byte-for-byte reply comparison")
    args = p.parse_args(argv)
    if args.py_spy:
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kso-latency-") as d:
        tmp = Path(d)
        print("\n".join(machine_info()), flush=True)
        if args.duration:
            return run_soak(args, tmp)
        if args.compare_tree:
            return run_compare(args, tmp)
        return run_matrix(args, tmp)
