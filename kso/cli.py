"""The ``kso`` command. Subcommands import their layer lazily, so ``kso --help`` stays fast and the
lower layers never import this one."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys

COMMAND_MODULES = ("forecasting.cli", "optimizer.plan.cli", "optimizer.reoptimize.cli", "benchmarks.sim.cli", "scheduler.cli")
# The modules of the `bench` extra (pyproject.toml): the commands that run the benchmarks need them, kso itself does not.
BENCH_MODULES = ("matplotlib", "psutil")
BENCH_COMMANDS = ("demo", "bench")


def missing_modules(names: tuple[str, ...]) -> list[str]:
    """The names among ``names`` that cannot be imported here (looked up, not imported: stays fast)."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def _extender(args: argparse.Namespace) -> int:
    from extender.config import load_config
    from extender.server import serve

    env = dict(os.environ)
    if args.port:
        env["HTTP_PORT"] = str(args.port)
    if args.host:
        env["KSO_HOST"] = args.host
    if args.admin_port is not None:
        env["KSO_ADMIN_PORT"] = str(args.admin_port)
    if args.admin_host:
        env["KSO_ADMIN_HOST"] = args.admin_host
    if args.snapshot:
        env["KSO_CLUSTER_SOURCE"], env["KSO_SNAPSHOT"] = "SNAPSHOT", args.snapshot
    if args.demo:
        env["KSO_CLUSTER_SOURCE"] = "DEMO"
    if args.agents:
        env["KSO_AGENTS"] = args.agents
    serve(load_config(env, args.config))
    return 0


def _demo(args: argparse.Namespace) -> int:
    try:
        from benchmarks.demo import run_demo
    except ModuleNotFoundError:  # installed without the benchmarks: the extender walk-through only
        from extender.demo import run_demo as extender_demo

        return extender_demo(port=args.port)
    return run_demo(out=args.out, port=args.port, hours=args.hours, verbose=args.verbose)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kso", description="kube-safe-optimizer: safe, forecast-driven placement")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("extender", help="serve the kube-scheduler extender (filter/prioritize/bind/preempt)")
    p.add_argument("--port", type=int, help="listen port (default HTTP_PORT or 80)")
    p.add_argument("--host", help="listen address (default KSO_HOST or 127.0.0.1)")
    p.add_argument("--admin-port", type=int, help="port of /metrics, /healthz, /readyz (default KSO_ADMIN_PORT; "
                                                  "0 = on the main port)")
    p.add_argument("--admin-host", help="listen address of the admin port (default KSO_ADMIN_HOST or 127.0.0.1)")
    p.add_argument("--snapshot", help="serve a cluster snapshot file (nodes and pods, YAML/JSON) instead of the API")
    p.add_argument("--demo", action="store_true", help="serve the embedded demo cluster")
    p.add_argument("--agents", help="comma-separated agents to enable (default KSO_AGENTS)")
    p.add_argument("--config", help="settings file (YAML/JSON mapping of setting names; env wins)")
    p.set_defaults(func=_extender)

    p = sub.add_parser("demo", help="the main job on embedded data: forecasts, a CP-SAT plan, the extender over HTTP, "
                                    "and a trace replay against the default scheduler (no cluster, no Prometheus)")
    p.add_argument("--port", type=int, default=0, help="extender port on 127.0.0.1 (default: a free one)")
    p.add_argument("--out", default="kso-demo-report", help="folder for the report, plots and plan")
    p.add_argument("--hours", type=float, default=4.0, help="hours of trace to replay")
    p.add_argument("--verbose", action="store_true", help="print the whole extender walk-through")
    p.set_defaults(func=_demo)

    # Each layer adds its own subcommands; a layer that is not installed is skipped.
    for module in COMMAND_MODULES:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise
            continue
        mod.add_commands(sub)

    args = parser.parse_args(argv)
    if args.command in BENCH_COMMANDS and (missing := missing_modules(BENCH_MODULES)):
        print(f"kso {args.command}: needs {', '.join(missing)} (the bench extra): pip install -e '.[bench]' in a checkout, "
              "or pip install 'kube-safe-optimizer[bench]'", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - bad input ends in one line, not a traceback (--debug shows it)
        if args.debug:
            raise
        print(error_line(args.command, exc), file=sys.stderr)
        return 1


def error_line(command: str, exc: BaseException) -> str:
    """One line for an error: the command, the exception's kind and its message (newlines folded)."""
    text = " ".join(str(exc).split())
    return f"kso {command}: error: {type(exc).__name__}{': ' + text if text else ''} (--debug shows the traceback)"


if __name__ == "__main__":
    sys.exit(main())
