"""What an agent is: a named set of predicates (filters) and priorities (scores) over one call.

Every function takes a ``Call`` (the pod and the rows of its candidate nodes) and works on whole
arrays, so a call over 5,000 nodes is a handful of numpy operations, not 5,000 Python iterations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from kso.core.objects import PodInfo
from kso.core.views import NodeView

MAX_PRIORITY = 10  # kube-scheduler's MaxExtenderPriority


@dataclass(slots=True)
class Call:
    """One scheduling question: a pod and its candidate nodes (in the order kube-scheduler sent)."""

    pod: PodInfo
    view: NodeView
    # Requests to take off each node before judging it (preemption victims), (n, R) or None.
    freed: np.ndarray | None = None
    # Per-call memo, so agents that serve a predicate and several priorities compute their inputs once.
    memo: dict[str, Any] = field(default_factory=dict)

    def requested(self) -> np.ndarray:
        """Requests already on each node, less what preemption would free."""
        if self.freed is None:
            return self.view.requested
        return np.maximum(self.view.requested - self.freed, 0.0)


@dataclass(slots=True)
class PredicateResult:
    passed: np.ndarray  # bool (n,)
    reasons: dict[int, str] = field(default_factory=dict)  # index of a failed node -> why
    notes: dict[int, str] = field(default_factory=dict)  # index -> why it passed without judging

    @staticmethod
    def all_pass(n: int) -> PredicateResult:
        return PredicateResult(np.ones(n, dtype=bool))


Predicate = Callable[[Call], PredicateResult]
Priority = Callable[[Call], np.ndarray]  # int scores 0..10, shape (n,)


class Agent:
    """Base class. Subclasses set ``name``, ``Params`` (a settings dataclass) and fill
    ``predicates`` / ``priorities`` with route name -> bound method."""

    name: ClassVar[str] = ""
    # The keys of explain()'s result that hold one value per node of the call; the others are call-wide.
    explain_per_node: ClassVar[tuple[str, ...]] = ()
    Params: ClassVar[type] = object

    def __init__(self, params: Any) -> None:
        self.params = params
        self.predicates: dict[str, Predicate] = {}
        self.priorities: dict[str, Priority] = {}
        # The priorities that pull pods together (pack): the engine withholds them on nodes whose load kso cannot
        # see yet (decisions/sight.py).
        self.packing: frozenset[str] = frozenset()

    def explain(self, call: Call) -> dict[str, Any]:
        """Intermediate values for /debug/explain: name -> list per node for the keys in explain_per_node,
        name -> call-wide value for the others."""
        return {}
