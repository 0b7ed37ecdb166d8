"""The ``kso`` command itself (kso/cli.py): what loads for ``--help``, ``--version``, options after the
subcommand, and errors that show the subcommand's usage."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest

from kso.cli import COMMANDS, build_parser, main
from kso.core.cluster_source import InputError
from kso.core.net import free_port

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("forecasting", "optimizer", "extender", "scheduler", "benchmarks")
# What `kso --help` must not import: the heavy libraries the layers pull (scipy.signal alone took seconds on a
# loaded 2-core machine) and any module of the layers but the packages that hold the subcommands' modules
# (looking a module up imports its parent packages, which are empty).
HEAVY = ("numpy", "scipy", "pandas", "fastapi", "uvicorn", "kubernetes", "ortools", "yaml", "orjson")
PARENTS = {module.rsplit(".", i)[0] for module, _ in COMMANDS.values() if module for i in range(1, module.count(".") + 1)}


def _imported_by(*argv: str) -> set[str]:
    """Top-level packages imported by ``python3 -m kso.cli *argv`` in a fresh interpreter (-X importtime)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kso.cli", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return names


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_help_and_version_import_no_layer_and_no_heavy_library(argv: list[str]) -> None:
    heavy = sorted(name for name in _imported_by(*argv) - PARENTS if name.split(".")[0] in HEAVY + LAYERS)
    assert not heavy, f"kso {' '.join(argv)} imports {heavy}"


def test_version_is_the_installed_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"kso {version('kube-safe-optimizer')}\n"


def test_the_lazy_help_lists_what_the_modules_add() -> None:
    """`kso --help` is built from COMMANDS without importing the modules; with every module loaded it reads the
    same, so a command added, renamed or moved to another module fails here until COMMANDS says so."""
    assert build_parser([]).format_help() == build_parser(list(COMMANDS)).format_help()


def _help_of(parse: Callable[[], object], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        parse()
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_parses_its_own_options(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`kso <command> ...` loads that command's module: its help is the one of the parser with every module loaded."""
    lazy = _help_of(lambda: main([command, "--help"]), capsys)
    full = _help_of(lambda: build_parser(list(COMMANDS)).parse_args([command, "--help"]), capsys)
    assert lazy.startswith(f"usage: kso {command} ") and "--debug" in lazy
    assert lazy == full


@pytest.mark.parametrize("argv", [["plan", "--snapshot", "nope.json", "--debug"], ["--debug", "plan", "--snapshot", "nope.json"]])
def test_debug_before_or_after_the_subcommand_shows_the_traceback(argv: list[str]) -> None:
    with pytest.raises(InputError, match="nope.json"):
        main(argv)


def test_without_debug_the_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", "nope.json"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "nope.json" in err


def test_a_mistyped_flag_shows_the_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--snapshto", "x.json"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kso plan ") and "--snapshot PATH" in err
    assert "kso plan: error: unrecognized arguments: --snapshto x.json (did you mean --snapshot?)" in err


def _extender_fails(*argv: str) -> str:
    """``kso extender --demo *argv`` that must stop at once: its stderr, checked to be one line, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "kso.cli", "extender", "--demo", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("taken", ["--port", "--admin-port"])
def test_a_taken_port_is_one_line_naming_the_option(taken: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        other = free_port()
        ports = {"--port": port, "--admin-port": other} if taken == "--port" else {"--port": other, "--admin-port": port}
        line = _extender_fails(*(f"{flag}={p}" for flag, p in ports.items()))
    assert f"127.0.0.1:{port}" in line and taken in line and "address already in use" in line, line


def test_the_admin_port_equal_to_the_main_port_is_one_line() -> None:
    port = free_port()
    line = _extender_fails("--port", str(port), "--admin-port", str(port))
    assert "--admin-port" in line and "--port" in line and str(port) in line, line


def test_without_a_cluster_only_the_commands_that_read_snapshots_suggest_one(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """kso scheduler binds pods through an API server and has no --snapshot: its error must not suggest one."""
    nowhere = str(tmp_path / "no-kubeconfig")
    assert main(["scheduler", "--kubeconfig", nowhere]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and nowhere in err and "snapshot" not in err, err
    assert main(["plan", "--kubeconfig", nowhere]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "use --snapshot PATH or --demo" in err, err
