"""The layers never import upward: kso's domain <- forecasting <- optimizer <- the decision engine
(decisions) <- extender <- scheduler <- the ``kso`` command and benchmarks. Every import of every module
counts, lazy ones inside functions included, and so does ``importlib.import_module`` with a literal name.
The scheduler takes its decisions from the decision engine (decisions/), not from the extender's HTTP layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.layout import PACKAGES

ROOT = Path(__file__).resolve().parents[1]
# Lowest first. kso.cli is the command: on top, beside the benchmarks (each may import the other); decisions/
# is the decision engine, between the optimizer and the extender; everything else under kso/ is the domain at the
# bottom. ``kso shadow`` (shadow/) judges with the scheduler's pieces: above them, beside the command.
LAYERS = {"kso": 0, "forecasting": 1, "optimizer": 2, "decisions": 3, "extender": 4, "scheduler": 5, "kso.cli": 6,
          "benchmarks": 6, "shadow": 6}
# What scheduler/ may use of extender/: kso's configuration (extender.config), the plan cache's jobs
# (extender.plan_jobs, beside the plan cache) and the logging setup. Its decisions come from the decision engine (decisions/).
SCHEDULER_USES_OF_EXTENDER = ("extender.config", "extender.plan_jobs", "extender.server.configure_logging")


def layer_of(module: str) -> int | None:
    """The layer of a dotted module name, None for modules outside the project (stdlib, libraries)."""
    for sub in ("kso.cli",):
        if module == sub or module.startswith(sub + "."):
            return LAYERS[sub]
    return LAYERS.get(module.split(".")[0])


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``, relative ones resolved against ``module``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # ``from pkg import name`` may import the submodule pkg.name: judge the deepest one that is ours.
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def upward_imports() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = module_name(path)
            own = layer_of(module)
            assert own is not None, module
            tree = ast.parse(path.read_text(), str(path))
            for line, target in imported(tree, module, path.name == "__init__.py"):
                theirs = layer_of(target)
                if theirs is not None and theirs > own:
                    found.append(f"{path.relative_to(ROOT)}:{line}: {module} (layer {own}) imports {target} (layer {theirs})")
    return found


def test_no_module_imports_a_higher_layer() -> None:
    assert upward_imports() == []


def test_the_scheduler_decides_with_the_engine_not_the_extender() -> None:
    found = []
    for path in sorted((ROOT / "scheduler").rglob("*.py")):
        module = module_name(path)
        for line, target in imported(ast.parse(path.read_text(), str(path)), module, path.name == "__init__.py"):
            if target.split(".")[0] == "extender" and not target.startswith(SCHEDULER_USES_OF_EXTENDER):
                found.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    assert found == []


@pytest.mark.parametrize(("source", "module", "is_package", "expected"), [
    ("import optimizer.model", "forecasting.cli", False, "optimizer.model"),
    ("def f():\n    from extender import server", "optimizer.plan", False, "extender.server"),
    ("from .. import plan", "optimizer.sub.mod", False, "optimizer.plan"),
    ("from .model import x", "optimizer", True, "optimizer.model.x"),
    ("importlib.import_module('scheduler.cli')", "kso.core.kube", False, "scheduler.cli"),
])
def test_imports_are_found_wherever_they_are(source: str, module: str, is_package: bool, expected: str) -> None:
    assert [m for _, m in imported(ast.parse(source), module, is_package)] == [expected]


def test_layers_of_the_command_and_the_domain() -> None:
    assert layer_of("kso.cli") > layer_of("scheduler.cli") > layer_of("extender.server") > layer_of("optimizer.plan")  # type: ignore[operator]
    assert layer_of("extender.verbs") > layer_of("decisions.engine") > layer_of("optimizer.plan")  # type: ignore[operator]
    assert layer_of("decisions") == layer_of("decisions.agents.safe") > layer_of("kso.core.cluster")  # type: ignore[operator]
    assert layer_of("optimizer.plan") > layer_of("forecasting.models") > layer_of("kso.core.kube") == layer_of("kso") == 0  # type: ignore[operator]
    assert layer_of("numpy") is None and layer_of("benchmarks.demo") == layer_of("kso.cli")


MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    """A module past 600 lines holds more than one thing: split it where its parts meet (docs/architecture.md)."""
    long = [f"{p.relative_to(ROOT)}: {n}" for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert long == []
