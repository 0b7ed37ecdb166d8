"""Agent registry: agent name -> class. Adding an agent is one file in this folder plus one line here."""

from __future__ import annotations

from extender.agents.base import Agent
from extender.agents.congestion import CongestionAgent
from extender.agents.cost import CostAgent
from extender.agents.foo import FooAgent
from extender.agents.image import ImageAgent
from extender.agents.pigeon import PigeonAgent
from extender.agents.safe import SafeAgent

AGENTS: dict[str, type[Agent]] = {
    SafeAgent.name: SafeAgent,
    PigeonAgent.name: PigeonAgent,
    CongestionAgent.name: CongestionAgent,
    ImageAgent.name: ImageAgent,
    FooAgent.name: FooAgent,
    CostAgent.name: CostAgent,
}
