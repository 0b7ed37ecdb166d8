"""The cluster flags of the commands that read a cluster (``kso plan``, ``kso reoptimize``, ``kso annotate``):
--snapshot (and --demo), --kubeconfig and --context, turned into a kso.core.cluster_source.ClusterSource.
Only the command-line modules use this; nothing below them sees argparse."""

from __future__ import annotations

import argparse
from typing import Any

from kso.core.cluster_source import ClusterSource


def add_cluster_args(p: argparse.ArgumentParser, *, demo: bool = True,
                     snapshot_help: str = "cluster from a snapshot file instead of the API server",
                     demo_help: str = "the embedded demo cluster") -> Any:
    """--snapshot (and --demo), --kubeconfig and --context. Returns the group of cluster sources (the
    alternatives), so that a command can add one of its own (``kso plan --openb``)."""
    where = p.add_mutually_exclusive_group()
    where.add_argument("--snapshot", metavar="PATH", help=snapshot_help)
    if demo:
        where.add_argument("--demo", action="store_true", help=demo_help)
    p.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    return where


def cluster_source(args: argparse.Namespace) -> ClusterSource:
    """The ClusterSource the flags of add_cluster_args name."""
    return ClusterSource(snapshot=args.snapshot, demo=bool(getattr(args, "demo", False)), kubeconfig=args.kubeconfig,
                         context=getattr(args, "context", None),
                         offline_flags="--snapshot PATH or --demo" if hasattr(args, "demo") else "--snapshot PATH")
