"""Node costs for ``kso annotate --cost``: a price per node, from a user's price file keyed by node name or
by the value of a node label (the instance type by default), written as the cost annotation that the plan's
COST policy, the cost agent and ``kso scheduler --seed-compatible`` read (KSO_PLAN_COST_KEY, Hightower's
``hightower.com/cost`` by default). ``--random`` gives the seed annotator's random prices, for demos only.

Price file: a YAML or JSON mapping ``key: price``, or CSV lines ``key,price`` (a header line is allowed).
"""

from __future__ import annotations

import csv
import io
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kso.core.objects import NodeInfo
from kso.core.settings import setting

INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
# The seed annotator's price list (kelseyhightower/scheduler, annotator/main.go).
SEED_PRICES = ("0.05", "0.10", "0.20", "0.40", "0.80", "1.60")


class PriceFileError(ValueError):
    """A price file that cannot be used; the message names the file and the entry."""


DEFAULT_COST_KEY = "hightower.com/cost"  # Hightower's toy scheduler's annotation


@dataclass
class CostKeySettings:
    """The one cost key of kso: read by the plan (PlanSettings inherits it), the cost agent, ``kso annotate
    --cost`` and ``kso scheduler --seed-compatible``."""

    cost_key: str = setting("KSO_PLAN_COST_KEY", DEFAULT_COST_KEY, help="node annotation or label with its cost")


def _price(raw: Any, where: str) -> str:
    """A price as the text to write: a finite, non-negative number (kept as written when it is text)."""
    text = str(raw).strip()
    try:
        value = float(text)
    except ValueError:
        raise PriceFileError(f"{where}: price {raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise PriceFileError(f"{where}: price {raw!r} must be a finite number >= 0")
    return text


def load_prices(path: str | Path) -> dict[str, str]:
    """key -> price text from a YAML/JSON mapping or a two-column CSV."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PriceFileError(f"price file {path}: {exc}") from None
    data: Any = None
    if path.suffix.lower() != ".csv":
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PriceFileError(f"price file {path}: not YAML/JSON ({exc})") from None
    if isinstance(data, dict):
        return {str(k): _price(v, f"price file {path}, entry {k!r}") for k, v in data.items()}
    prices: dict[str, str] = {}
    for n, row in enumerate(csv.reader(io.StringIO(text)), 1):
        cells = [c.strip() for c in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if len(cells) != 2:
            raise PriceFileError(f"price file {path}, line {n}: expected 'key,price', got {row!r}")
        if n == 1 and not _is_number(cells[1]):
            continue  # a header
        prices[cells[0]] = _price(cells[1], f"price file {path}, line {n}")
    if not prices:
        raise PriceFileError(f"price file {path}: no prices (expected a mapping key: price, or CSV key,price)")
    return prices


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def node_prices(nodes: Sequence[NodeInfo], prices: dict[str, str],
                labels: Sequence[str] = INSTANCE_TYPE_LABELS) -> tuple[dict[str, str], list[str]]:
    """Per node, the price of its name, else of the first of ``labels`` whose value has one. Returns
    (node -> price, the nodes without one, each with why)."""
    out: dict[str, str] = {}
    missing: list[str] = []
    for node in nodes:
        if node.name in prices:
            out[node.name] = prices[node.name]
            continue
        values = [node.labels[label] for label in labels if label in node.labels]
        hit = next((v for v in values if v in prices), None)
        if hit is not None:
            out[node.name] = prices[hit]
        else:
            seen = ", ".join(f"{label}={node.labels[label]}" for label in labels if label in node.labels) or "no such label"
            missing.append(f"{node.name}: no price for its name or {' / '.join(labels)} ({seen})")
    return out, missing


def random_prices(nodes: Sequence[NodeInfo], seed: int | None = None) -> dict[str, str]:
    """The seed annotator's demo: each node a random price from SEED_PRICES."""
    rng = random.Random(seed)
    return {node.name: rng.choice(SEED_PRICES) for node in nodes}


def cost_patches(prices: dict[str, str], key: str) -> dict[str, dict[str, Any]]:
    return {name: {"metadata": {"annotations": {key: price}}} for name, price in prices.items()}
