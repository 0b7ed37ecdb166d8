"""Resource quantities: one parser, one set of canonical units, used by every package.

Canonical units: ``cpu`` in millicores; ``memory``, ``ephemeral-storage`` and ``hugepages-*`` in
bytes; ``pods`` and extended resources (``nvidia.com/gpu``, ...) as plain counts.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
GPU = "nvidia.com/gpu"

MIB = 1024.0 * 1024.0

# kube-scheduler's NodeResourcesFit counts a container without a request as this much, for scoring only.
DEFAULT_NONZERO_CPU_MILLI = 100.0
DEFAULT_NONZERO_MEMORY_BYTES = 200.0 * MIB


# The largest quantity kso accepts, in canonical units (1e15 cores in millicores, ~888 PiB in bytes):
# Kubernetes keeps quantities in int64 (9.2e18), and anything near float64's range would overflow the
# sums and ratios the agents compute (a node with cpu "1e308" scored -2^63).
MAX_CANONICAL_QUANTITY = 1e18


class QuantityError(ValueError):
    """A Kubernetes quantity that cannot be used: unparsable, negative, NaN or infinite."""


@lru_cache(maxsize=1)
def _k8s_parse_quantity() -> Callable[[str], Decimal]:
    """The kubernetes client's ``kubernetes.utils.quantity.parse_quantity``, loaded on first use from its own
    file. ``from kubernetes.utils import ...`` runs ``kubernetes/__init__``, which imports the whole client
    (a noticeable start-up cost), and every process that imports kso.core.objects paid it, the solver's children included; the
    quantity module itself needs only ``decimal``."""
    loaded = sys.modules.get("kubernetes.utils.quantity")
    if loaded is not None:
        return loaded.parse_quantity  # type: ignore[no-any-return]
    package = importlib.util.find_spec("kubernetes")  # finds the package without running its __init__
    if package is None or not package.submodule_search_locations:
        raise ImportError("the kubernetes client package is not installed")
    path = Path(list(package.submodule_search_locations)[0]) / "utils" / "quantity.py"
    spec = importlib.util.spec_from_file_location("kso._kubernetes_quantity", path) if path.is_file() else None
    if spec is None or spec.loader is None:
        # A client release that moved the module: take the slow, supported import rather than fail.
        from kubernetes.utils.quantity import parse_quantity

        return parse_quantity  # type: ignore[no-any-return]
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_quantity  # type: ignore[no-any-return]


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> float:
    try:
        value: Decimal = _k8s_parse_quantity()(text)
    except (ValueError, InvalidOperation, TypeError) as exc:
        raise QuantityError(f"quantity {text!r} is not a Kubernetes quantity") from exc
    if not value.is_finite():
        raise QuantityError(f"quantity {text!r} is not finite")
    if value < 0:
        raise QuantityError(f"quantity {text!r} is negative")
    result = float(value)
    if not math.isfinite(result):
        raise QuantityError(f"quantity {text!r} is out of range")
    return result


def parse_quantity(value: Any) -> float:
    """Parse a Kubernetes quantity ("250m", "1Gi", "1e3", 4) to a float in base units (cores, bytes).

    Raises QuantityError for anything that is not a finite, non-negative quantity.
    """
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r} is a boolean, not a quantity")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0:
            raise QuantityError(f"quantity {value!r} is not a finite non-negative number")
        return float(value)
    if not isinstance(value, str):
        raise QuantityError(f"quantity {value!r} has type {type(value).__name__}, expected a string")
    if len(value) > 64:
        raise QuantityError(f"quantity {value[:32]!r}... is too long")
    return _parse_text(value.strip())


def canonical(resource: str, base_value: float) -> float:
    """Convert a base-unit value to kso's canonical unit for that resource (cpu -> millicores)."""
    if resource == CPU:
        return base_value * 1000.0
    return base_value


def parse_resource_list(resources: Any, what: str) -> dict[str, float]:
    """Parse a ResourceList ({"cpu": "250m", ...}) into canonical units; ``what`` names it in errors."""
    if resources is None:
        return {}
    if not isinstance(resources, dict):
        raise QuantityError(f"{what} must be an object of resource quantities")
    out: dict[str, float] = {}
    for name, raw in resources.items():
        try:
            value = canonical(name, parse_quantity(raw))
        except QuantityError as exc:
            raise QuantityError(f"{what}[{name}]: {exc}") from None
        if not value <= MAX_CANONICAL_QUANTITY:
            raise QuantityError(f"{what}[{name}]: quantity {raw!r} is out of range (above {MAX_CANONICAL_QUANTITY:g} "
                                f"{'millicores' if name == CPU else 'units'})")
        out[name] = value
    return out


def add_into(total: dict[str, float], more: dict[str, float]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0.0) + value


def max_into(total: dict[str, float], other: dict[str, float]) -> None:
    for name, value in other.items():
        if value > total.get(name, 0.0):
            total[name] = value


def quantity(resource: str, value: float) -> str:
    """A canonical quantity as the API takes it (rounded up, never below what was refused)."""
    if resource == CPU:
        return f"{math.ceil(value)}m"
    return str(math.ceil(value))


def needs_limit(resource: str) -> bool:
    """The API server refuses a request of this resource without an equal limit: hugepages, and extended resources
    (a name with a domain other than kubernetes.io's, e.g. nvidia.com/gpu; "requests.*" names are quota's)."""
    if resource.startswith("hugepages-"):
        return True
    domain, slash, _ = resource.partition("/")
    if not slash or resource.startswith("requests."):
        return False
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))
