"""Agent registry: agent name -> class. Adding an agent is one file in this folder plus one line here
(tests/support/foo_agent.py is the template to copy)."""

from __future__ import annotations

from decisions.agents.base import Agent
from decisions.agents.congestion import CongestionAgent
from decisions.agents.cost import CostAgent
from decisions.agents.image import ImageAgent
from decisions.agents.pigeon import PigeonAgent
from decisions.agents.safe import SafeAgent

AGENTS: dict[str, type[Agent]] = {
    SafeAgent.name: SafeAgent,
    PigeonAgent.name: PigeonAgent,
    CongestionAgent.name: CongestionAgent,
    ImageAgent.name: ImageAgent,
    CostAgent.name: CostAgent,
}
