"""``kso shadow``'s command line: its arguments and its entry point. Light to import (the standard library only):
``kso shadow --help`` builds its parser from here, and shadow.run (the extender's configuration, the node cache, the
decision engine) is imported only to run."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any


def cmd_shadow(args: argparse.Namespace) -> int:
    from extender.config import load_config
    from kso.core.logs import configure_logging
    from shadow.run import start

    if args.duration < 0:
        print(f"kso shadow: --duration {args.duration:g} is negative", file=sys.stderr)
        return 2
    env = dict(os.environ)
    for flag, name in ((args.address, "KSO_SHADOW_ADDRESS"), (args.report, "KSO_SHADOW_REPORT"),
                       (args.records, "KSO_SHADOW_RECORDS")):
        if flag is not None:
            env[name] = flag
    if getattr(args, "log_format", None):
        env["KSO_LOG_FORMAT"] = args.log_format
    logs = load_config(env, args.config).logs
    configure_logging(logs.level_number, logs.format)
    try:
        running = start(env, args.config, kubeconfig=args.kubeconfig)
    except (OSError, ValueError) as exc:  # KubeConfigError, a bad address, a port in use: one line, exit 1
        print(f"kso shadow: {exc}", file=sys.stderr)
        return 1
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait(args.duration if args.duration else None)
    running.close()
    print(f"kso shadow: report written to {running.shadow.settings.report_path}")
    return 0


def add_commands(sub: Any) -> None:
    p = sub.add_parser("shadow", help="run beside the cluster's scheduler, off its path: record what kso would have "
                                      "decided for each bind and what happened to both nodes (metrics and a report)")
    p.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--config", help="settings file (YAML/JSON mapping of setting names; env wins)")
    p.add_argument("--address", help="host:port of /metrics, /healthz and /report (default KSO_SHADOW_ADDRESS or "
                                     "127.0.0.1:9110; empty = not served)")
    p.add_argument("--report", help="the Markdown report's path (default KSO_SHADOW_REPORT or shadow-report.md)")
    p.add_argument("--records", help="append one JSON line per judged bind to this file, once its outcome is read "
                                     "(default KSO_SHADOW_RECORDS; none)")
    p.add_argument("--duration", type=float, default=0.0,
                   help="stop after this many seconds and write the report (default: run until stopped)")
    p.set_defaults(func=cmd_shadow)
