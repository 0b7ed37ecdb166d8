"""kso.core.resources parses quantities with the kubernetes client's parser, without importing the client."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kso.core.resources import QuantityError, parse_quantity


@pytest.mark.parametrize(("text", "value"), [("250m", 0.25), ("1Gi", 2.0**30), ("1e3", 1000.0), ("2k", 2000.0),
                                             ("100n", 1e-7), ("1.5", 1.5)])
def test_quantities_parse_as_the_kubernetes_client_parses_them(text: str, value: float) -> None:
    from kubernetes.utils import parse_quantity as client_parse

    assert parse_quantity(text) == pytest.approx(value)
    assert parse_quantity(text) == float(client_parse(text))


@pytest.mark.parametrize("text", ["1mi", "lots", "-1", "NaN", "1Qi"])
def test_bad_quantities_are_a_quantity_error(text: str) -> None:
    with pytest.raises(QuantityError, match=text.strip("-")):
        parse_quantity(text)


def test_the_solver_side_imports_no_kubernetes_client() -> None:
    # Every solver child imports optimizer.plan.protected_solver; the whole client costs it 1-2 s of start-up.
    code = ("import sys, optimizer.plan.protected_solver, optimizer.reoptimize.migration, kso.core.objects\n"
            "from kso.core.resources import parse_quantity\n"
            "assert parse_quantity('1Mi') == 2**20\n"
            "print(sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
