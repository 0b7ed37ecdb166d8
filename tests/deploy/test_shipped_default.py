"""The replay's ``kso`` row is what deploy/ installs: deploy/settings.yaml and benchmarks/sim/policies/kso_shipped.py
agree on every setting the replay models, and every other setting deploy/ sets is the code's default or one the
replay does not model (addresses, files, solver budgets)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from benchmarks.sim.policies.kso_shipped import SHIPPED, SHIPPED_ENV
from extender.config import load_config

ROOT = Path(__file__).resolve().parents[2]
# settings deploy/ sets that the replay has no counterpart for (where kso runs, talks to and writes)
NOT_REPLAYED = {"KSO_CLUSTER_SOURCE", "LOG_LEVEL", "KSO_URL_PREFIX", "KSO_HTTP_TIMEOUT_S", "KSO_CAPACITY_NAMESPACE",
                "KSO_CAPACITY_LEASE_S", "KSO_FORECAST_SOURCE", "KSO_FORECAST_REFRESH", "KSO_PLAN_FILE",
                "KSO_PLAN_INTERVAL_S", "KSO_PLAN_MAX_AGE_S", "KSO_SCHEDULER_NAMES", "KSO_SOLVER_TIME_LIMIT_S",
                "KSO_SOLVER_WORKERS", "KSO_SOLVER_GAP", "KSO_PLAN_POLICY", "KSO_CAPACITY_SIGNAL",
                "KSO_CAPACITY_KEEP_NODES"}


def deploy_settings() -> dict[str, str]:
    return yaml.safe_load((ROOT / "deploy" / "settings.yaml").read_text())["data"]


def test_the_replayed_kso_is_what_deploy_ships() -> None:
    shipped = deploy_settings()
    assert (shipped.get("KSO_CAPACITY_SIGNAL", "false") == "true") == (SHIPPED["capacity"] == "placeholder")
    assert (shipped.get("KSO_CAPACITY_KEEP_NODES", "false") == "true") == (SHIPPED["mark"] == "refused")
    for name, value in SHIPPED_ENV.items():
        assert shipped.get(name) == value, f"deploy/settings.yaml {name}={shipped.get(name)!r}, the replay's kso {value!r}"
    # every other setting deploy/ gives a value the replay models is the code's default
    modelled = {k: v for k, v in shipped.items() if k not in NOT_REPLAYED and k not in SHIPPED_ENV}
    assert differing_from_defaults(modelled) == [], (
        "deploy/settings.yaml sets these to other than the code's default: add them to SHIPPED_ENV so the replay's kso "
        "runs them too")


def differing_from_defaults(env: dict[str, str]) -> list[str]:
    """The settings (and agent parameters) ``env`` gives other values than the code's defaults."""
    defaults, configured = load_config({}), load_config(env)
    differ = [f.name for f in dataclasses.fields(defaults.settings)
              if getattr(defaults.settings, f.name) != getattr(configured.settings, f.name)]
    differ += [f"{agent}.{f.name}" for agent, params in defaults.agent_params.items() for f in dataclasses.fields(params)
               if getattr(params, f.name) != getattr(configured.agent_params[agent], f.name)]
    return differ


def test_a_setting_off_its_default_is_caught() -> None:
    assert differing_from_defaults({"SAFEUTILIZATION": "80"}) == ["safe.utilization"]
    assert differing_from_defaults({"KSO_PACK_UNSEEN_MAX": "10"}) == ["pack_unseen_max"]
