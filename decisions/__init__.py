"""The decision engine both front ends share (``kso extender`` and ``kso scheduler``): the agents, their
verdicts and scores, the plan's preference and explain. Below the HTTP layer: nothing here knows a wire
format."""
