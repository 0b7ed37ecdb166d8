"""Agent ``foo``: the template. Its predicate passes every node and its priority gives every node 1.
Copy this file to start an agent, then add one line to extender/agents/__init__.py."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from extender.agents.base import Agent, Call, PredicateResult


@dataclass
class FooParams:
    pass


class FooAgent(Agent):
    name = "foo"
    Params = FooParams

    def __init__(self, params: FooParams) -> None:
        super().__init__(params)
        self.predicates = {"foo": self.always}
        self.priorities = {"foo": self.one}

    def always(self, call: Call) -> PredicateResult:
        return PredicateResult.all_pass(len(call.view))

    def one(self, call: Call) -> np.ndarray:
        return np.ones(len(call.view), dtype=int)
