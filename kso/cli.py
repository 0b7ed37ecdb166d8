"""The ``kso`` command. Only the module of the subcommand being run is imported (``COMMANDS``), so
``kso --help`` and ``kso --version`` stay fast, and the lower layers never import this one."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

PACKAGE = "kube-safe-optimizer"
# Each subcommand, in `kso --help` order: the module whose ``add_commands(subparsers)`` adds it (None = this
# module) and its line in `kso --help` (the same text as the module's add_parser help; tests/kso/test_cli.py
# checks that the two agree). A module that is not installed (the benchmarks) drops its commands.
COMMANDS: dict[str, tuple[str | None, str]] = {
    "extender": (None, "serve the kube-scheduler extender (filter/prioritize/bind/preempt)"),
    "demo": (None, "the main job on embedded data: forecasts, a CP-SAT plan, the extender over HTTP, and a trace "
                   "replay against the default scheduler (no cluster, no Prometheus)"),
    "settings": (None, "print every setting kso reads: its default, the values it accepts and what it does "
                       "(docs/configuration.md)"),
    "forecast": ("forecasting.cli", "forecast node utilisation from Prometheus or a trace"),
    "annotate": ("forecasting.cli", "write kube-safe-scheduler node annotations from forecasts"),
    "plan": ("optimizer.plan.cli", "solve a placement plan once (CP-SAT) and write the plan file"),
    "reoptimize": ("optimizer.reoptimize.cli", "re-optimise the running placement with a move budget (dry-run unless --execute)"),
    "bench": ("benchmarks.sim.cli", "replay a trace through the default scheduler, the peers, kso and the oracle "
                                    "reference, and write the cost-harm report"),
    "scheduler": ("scheduler.cli", "run kso as a standalone scheduler for pods whose spec.schedulerName names it"),
    "shadow": ("shadow.cli", "run beside the cluster's scheduler, off its path: record what kso would have decided for "
                             "each bind and what happened to both nodes (metrics and a report)"),
}
# KSO_* variables read by the benchmarks and the tests, not by kso: known, so that the environment check
# (check_configuration) lets them through.
DEVELOPMENT_VARIABLES = frozenset({
    "KSO_SHARED", "KSO_REQUIRE_K8S", "KSO_K8S_DIST", "KSO_K8S_CACHE", "KSO_K8S_BIN_DIR", "KSO_ETCD", "KSO_CACHE_DIR",
    "KSO_REQUIRE_RAY", "KSO_BENCH_HISTORY", "KSO_BENCH_TREE", "KSO_BENCH_CONFIGS", "KSO_BENCH_CACHE"})
# Kubernetes puts a variable per Service of the pod's namespace into its environment (a Service "kso-metrics"
# gives KSO_METRICS_SERVICE_HOST, KSO_METRICS_PORT=tcp://..., ...): those are not settings.
SERVICE_LINK = re.compile(r"[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)")
SERVICE_LINK_URL = re.compile(r"(tcp|udp|sctp)://")
# The modules of the `bench` extra (pyproject.toml): the commands that run the benchmarks need them, kso itself does not.
BENCH_MODULES = ("matplotlib", "psutil")
BENCH_COMMANDS = ("demo", "bench")


def missing_modules(names: tuple[str, ...]) -> list[str]:
    """The names among ``names`` that cannot be imported here (looked up, not imported: stays fast)."""
    return [name for name in names if not _installed(name)]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def version() -> str:
    """The installed package's version (its metadata), or a note that it is not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version(PACKAGE)
    except PackageNotFoundError:
        return "(not installed: run from a checkout)"


class _VersionAction(argparse.Action):
    """``--version``: the package metadata is read only when asked for (argparse's own action wants the
    string when the parser is built)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> NoReturn:
        print(f"kso {version()}")
        parser.exit()


class SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: an argument it does not know is reported with its own usage (argparse hands
    unknown arguments back to the top-level parser, whose usage does not show the subcommand's flags)."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            import difflib

            options = [o for action in self._actions for o in action.option_strings]
            close = [m[0] for e in extras if e.startswith("--")
                     for m in [difflib.get_close_matches(e.partition("=")[0], options, n=1)] if m]
            hint = f" (did you mean {' / '.join(close)}?)" if close else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed, extras


def add_common_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """Options every subcommand takes as well as ``kso`` itself (``kso plan ... --debug``): on a subcommand
    they default to nothing, so that one given before the subcommand is kept."""
    parser.add_argument("--debug", action="store_true", default=False if top else argparse.SUPPRESS,
                        help="show the traceback of an error")
    parser.add_argument("--log-format", type=str.upper, choices=("TEXT", "JSON"), metavar="{text,json}",
                        default=None if top else argparse.SUPPRESS,
                        help="log lines as text or one JSON object per line (default KSO_LOG_FORMAT or text)")


def add_commands(sub: Any) -> None:
    """The subcommands of this module: ``extender``, ``demo`` and ``settings``."""
    p = sub.add_parser("extender", help=COMMANDS["extender"][1])
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

    p = sub.add_parser("demo", help=COMMANDS["demo"][1])
    p.add_argument("--port", type=int, default=0, help="extender port on 127.0.0.1 (default: a free one)")
    p.add_argument("--out", default="kso-demo-report", help="folder for the report, plots and plan")
    p.add_argument("--hours", type=float, default=4.0, help="hours of trace to replay")
    p.add_argument("--verbose", action="store_true", help="print the whole extender walk-through")
    p.set_defaults(func=_demo)

    p = sub.add_parser("settings", help=COMMANDS["settings"][1])
    p.set_defaults(func=_settings)


def settings_sections() -> list[tuple[str, list[type]]]:
    """Every settings class of kso, by section of the configuration table (``kso settings``)."""
    from decisions.agents import AGENTS
    from extender.config import ExtenderSettings
    from forecasting.prometheus import PrometheusSettings
    from forecasting.store import StoreSettings
    from forecasting.trace_dir import TraceSettings
    from kso.core.capacity import CapacitySettings
    from kso.core.logs import LogSettings
    from kso.core.settings import ConfigFileSettings
    from optimizer.settings import PlanSettings
    from scheduler.core import SchedulerSettings

    sections = [("Every command", [ConfigFileSettings, LogSettings]),
                ("The extender (kso extender)", [ExtenderSettings]),
                ("The capacity signal (kso extender, kso scheduler: placeholders for the cluster-autoscaler)",
                 [CapacitySettings]),
                ("Agents", [agent.Params for agent in AGENTS.values()]),
                ("Plans (kso plan, kso reoptimize, the extender's re-solve)", [PlanSettings]),
                ("Forecasts and Prometheus", [StoreSettings, PrometheusSettings, TraceSettings]),
                ("The standalone scheduler (kso scheduler)", [SchedulerSettings])]
    from forecasting.history_names import HistoryNames

    sections.append(("A cluster's history (kso bench --prometheus, kso shadow's throttling query)", [HistoryNames]))
    if importlib.util.find_spec("shadow") is not None:
        from shadow.settings import ShadowSettings

        sections.append(("The shadow (kso shadow)", [ShadowSettings]))
    return sections


def _kso_variables(env: Mapping[str, str]) -> list[str]:
    """The KSO_* names of ``env`` that claim to be settings (not Kubernetes' Service variables)."""
    return [name for name, value in env.items() if name.startswith("KSO_") and not SERVICE_LINK.fullmatch(name)
            and not (name.endswith("_PORT") and SERVICE_LINK_URL.match(value))]


def check_configuration(config_file: str | None, env: Mapping[str, str] | None = None) -> None:
    """The whole configuration, whichever command runs: the config file (``config_file``, else KSO_CONFIG) exists
    and is a mapping of setting names, the environment's KSO_* names are settings, and every value is one its
    setting accepts. ConfigError (one line, with the closest name for a typo) otherwise."""
    from kso.core.settings import ConfigError, check_names, load_settings, read_config_file, settings_fields

    env = os.environ if env is None else env
    path = config_file or env.get("KSO_CONFIG")
    file_values = read_config_file(path)
    classes = [cls for _, section in settings_sections() for cls in section]
    known = {f.metadata["env"] for _, f in settings_fields(classes)}
    check_names(_kso_variables(env), known | DEVELOPMENT_VARIABLES, "the environment")
    check_names(file_values, known, f"config file {path}")
    problems: dict[str, None] = {}  # each bad value once, though several classes read it (U*, eps)
    for cls in classes:
        try:
            load_settings(cls, env, file_values)
        except ConfigError as exc:
            problems.update(dict.fromkeys(str(exc).split("; ")))
    if problems:
        raise ConfigError("; ".join(problems))


def _settings(args: argparse.Namespace) -> int:
    from kso.core.settings import markdown_table

    print(markdown_table(settings_sections()), end="")
    return 0


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
    if args.log_format:
        env["KSO_LOG_FORMAT"] = args.log_format
    serve(load_config(env, args.config))
    return 0


def _demo(args: argparse.Namespace) -> int:
    try:
        from benchmarks.demo import run_demo
    except ModuleNotFoundError:  # installed without the benchmarks: the extender walk-through only
        from extender.demo import run_demo as extender_demo

        return extender_demo(port=args.port)
    return run_demo(out=args.out, port=args.port, hours=args.hours, verbose=args.verbose)


def build_parser(load: Iterable[str] = ()) -> argparse.ArgumentParser:
    """The ``kso`` parser with the full arguments of the commands in ``load`` (their modules imported) and
    only the name and help line of the others."""
    parser = argparse.ArgumentParser(prog="kso", description="kube-safe-optimizer: safe, forecast-driven placement")
    parser.add_argument("--version", action=_VersionAction, help="print the installed version and exit")
    add_common_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=SubcommandParser)
    wanted = {COMMANDS[name][0] for name in load if name in COMMANDS}
    loaded: set[str | None] = set()
    for name, (module, help_line) in COMMANDS.items():
        if name in sub.choices:  # added with an earlier command of the same module
            continue
        if module is not None and not _installed(module):
            continue
        if module not in wanted:
            sub.add_parser(name, help=help_line)
            continue
        if module not in loaded:
            loaded.add(module)
            add = add_commands if module is None else importlib.import_module(module).add_commands
            add(sub)
    for name in load:
        if name in sub.choices:
            add_common_options(sub.choices[name], top=False)
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``, importing only the module of the subcommand it names."""
    command = next((a for a in argv if a in COMMANDS), None)
    return build_parser([command] if command else []).parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.command in BENCH_COMMANDS and (missing := missing_modules(BENCH_MODULES)):
        print(f"kso {args.command}: needs {', '.join(missing)} (the bench extra): pip install -e '.[bench]' in a checkout, "
              "or pip install 'kube-safe-optimizer[bench]'", file=sys.stderr)
        return 2
    from kso.core.logs import configure_logging, logging_is_hosted
    from kso.core.settings import ConfigError

    # The format of every line from here on (kso extender and kso scheduler set their LOG_LEVEL later); a bad
    # KSO_LOG_FORMAT is reported by the check below, in text. Logging a host configured (tests) is its own.
    log_format = args.log_format or os.environ.get("KSO_LOG_FORMAT", "").strip().upper()
    if not logging_is_hosted():
        configure_logging(logging.WARNING, log_format if log_format in ("TEXT", "JSON") else "TEXT")
    try:
        if args.command != "settings":
            check_configuration(getattr(args, "config", None))
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except ConfigError as exc:  # the user's configuration, not kso: no traceback to offer
        if args.debug:
            raise
        fail(f"kso {args.command}: configuration error: {' '.join(str(exc).split())}")
        return 2
    except Exception as exc:  # noqa: BLE001 - bad input ends in one line, not a traceback (--debug shows it)
        if args.debug:
            raise
        fail(error_line(args.command, exc))
        return 1


def fail(line: str) -> None:
    """The error that ends a command: a line on stderr, or an ERROR record when the logs are JSON (a cluster
    that ships JSON logs then gets it as one)."""
    from kso.core.logs import current_format

    if current_format() == "JSON":
        logging.getLogger("kso").error(line)
    else:
        print(line, file=sys.stderr)


def error_line(command: str, exc: BaseException) -> str:
    """One line for an error: the command, the exception's kind and its message (newlines folded); an input the user
    gave that cannot be used (kso.core.cluster_source.InputError: a forecast source that does not answer, ...) is its
    message alone, which says what to change."""
    from kso.core.cluster_source import InputError

    text = " ".join(str(exc).split())
    if isinstance(exc, InputError) and text:
        return f"kso {command}: {text}"
    return f"kso {command}: error: {type(exc).__name__}{': ' + text if text else ''} (--debug shows the traceback)"


if __name__ == "__main__":
    sys.exit(main())
