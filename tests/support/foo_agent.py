"""Agent ``foo``: the template, kept for tests (it is not in the production registry). Its predicate passes
every node and its priority gives every node 1. Copy this file into decisions/agents/ to start an agent,
then add one line to decisions/agents/__init__.py. ``foo_registered`` lends it to the registry for a test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from decisions.agents import AGENTS
from decisions.agents.base import Agent, Call, PredicateResult


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


@contextmanager
def foo_registered() -> Iterator[None]:
    """The registry with ``foo`` in it (config loading and the engine read it), as before the block after it."""
    had = AGENTS.get(FooAgent.name)
    AGENTS[FooAgent.name] = FooAgent
    try:
        yield
    finally:
        if had is None:
            del AGENTS[FooAgent.name]
        else:
            AGENTS[FooAgent.name] = had
