"""Helpers shared by the pigeon agent's tests."""

from __future__ import annotations

from decisions.agents.pigeon import (
    PigeonAgent,
    PigeonParams,
)


def agent(policy: str, num_resources: int = 2) -> PigeonAgent:
    return PigeonAgent(PigeonParams(policy_objective=policy, num_resources=num_resources))


def names(k: int) -> list[str]:
    return [f"n{i}" for i in range(k)]
