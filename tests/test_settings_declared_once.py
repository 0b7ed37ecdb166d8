"""Each environment variable kso reads is declared by one setting() field: two declarations of one variable
drift apart (defaults, ranges), as U* and eps once did between the safe agent and the plan."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support.layout import PACKAGES

ROOT = Path(__file__).resolve().parents[1]
DECLARATION = re.compile(r'setting\(\s*"([A-Z][A-Z0-9_]*)"')


def test_every_setting_variable_is_declared_once() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if line.lstrip().startswith(("#", '"', "A field declared")):
                    continue
                for name in DECLARATION.findall(line):
                    where[name].append(f"{path.relative_to(ROOT)}:{n}")
    assert len(where) > 50, "the declarations were not found (pattern out of date?)"
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, f"declared more than once (inherit the one declaration instead): {twice}"


def test_a_bad_value_read_by_two_settings_classes_is_an_error_naming_it() -> None:
    """SAFEUTILIZATION is read by the safe agent's and the planner's settings (both inherit SafeBoundSettings):
    one typo is an error naming the variable, its value and what it accepts (no default taken silently)."""
    from extender.config import load_config
    from kso.core.settings import ConfigError

    with pytest.raises(ConfigError, match=r"SAFEUTILIZATION='ninety-once' \(environment\): not an integer"):
        load_config({"SAFEUTILIZATION": "ninety-once", "KSO_AGENTS": "safe"})
