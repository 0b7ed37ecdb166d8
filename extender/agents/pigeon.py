"""Agent ``pigeon``: placeholder until the vectorised implementation lands (helper at work)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from extender.agents.base import Agent, Call
from kso.settings import setting


@dataclass
class PigeonParams:
    policy_objective: str = setting("POLICY_OBJECTIVE", "A_BINPACK", kind="choice:A_BINPACK,LOAD_BALANCE,CONSOLIDATE")
    num_resources: int = setting("NUM_RESOURCES", 2, lo=1, hi=5)


class PigeonAgent(Agent):
    name = "pigeon"
    Params = PigeonParams

    def __init__(self, params: PigeonParams) -> None:
        super().__init__(params)
        self.priorities = {"pigeon-holing": self.score}

    def score(self, call: Call) -> np.ndarray:
        raise NotImplementedError
