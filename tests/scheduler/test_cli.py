"""scheduler.cli: settings read from the environment and the config file, bad ones failing before anything starts."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize("env, argv, message", [
    ({"KSO_SCHEDULER_LEASE": "bad"}, [], "KSO_SCHEDULER_LEASE='bad' is not namespace/name"),
    ({}, ["--debug-address", "127.0.0.1:x"], "port 'x' is not a number"),
    ({}, ["--debug-address", "127.0.0.1:70000"], "port out of range"),
    # placeholders stand for pods kso refused: kube-scheduler's rules alone must place them, not kso again
    ({"KSO_CAPACITY_SIGNAL": "true", "KSO_CAPACITY_SCHEDULER_NAME": "kso"}, [],
     "KSO_CAPACITY_SCHEDULER_NAME='kso' is a name this scheduler serves: the placeholders stand for pods it refused"),
    ({"KSO_CAPACITY_SIGNAL": "true", "KSO_CAPACITY_SCHEDULER_NAME": "batch"}, ["--name", "kso", "--name", "batch"],
     "KSO_CAPACITY_SCHEDULER_NAME='batch' is a name this scheduler serves"),
])
def test_bad_settings_fail_with_a_message_before_anything_starts(env: dict[str, str], argv: list[str], message: str,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from kso.cli import main as kso_main

    # the command configures logging (LOG_LEVEL on kso's loggers, a handler on the root): undone after the test
    monkeypatch.setattr(logging.getLogger(), "handlers", list(logging.getLogger().handlers))
    monkeypatch.setattr(logging.getLogger(), "level", logging.getLogger().level)
    monkeypatch.setattr(logging.getLogger("kso"), "level", logging.getLogger("kso").level)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert kso_main(["scheduler", "--kubeconfig", "/nonexistent", *argv]) == 1
    out = capsys.readouterr()
    assert message in out.err and message not in out.out  # errors go to stderr


def test_kso_scheduler_reads_its_settings_from_the_config_file_and_sets_only_kso_loggers(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from kso.cli import main as kso_main
    from scheduler.cli import load_scheduler_config

    path = tmp_path / "settings.yaml"
    path.write_text("LOG_LEVEL: DEBUG\nKSO_STANDALONE_NAMES: kso-a, kso-b\nKSO_PLAN_COST_KEY: example.com/price\n"
                    "KSO_SCHEDULER_ORDER: FIFO\nKSO_PLAN_POLICY: COST\n")
    for name in ("LOG_LEVEL", "KSO_STANDALONE_NAMES", "KSO_PLAN_COST_KEY", "KSO_SCHEDULER_ORDER", "KSO_PLAN_POLICY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KSO_SCHEDULER_ORDER", "PRIORITY")  # the environment wins over the file
    config = load_scheduler_config(config_file=str(path))
    assert config.scheduler.names == ["kso-a", "kso-b"] and config.scheduler.order == "PRIORITY"
    assert config.scheduler.cost_key == config.extender.plan.cost_key == "example.com/price"
    assert config.extender.plan.policy == "COST" and config.extender.logs.level == "DEBUG"

    root, kso = logging.getLogger(), logging.getLogger("kso")
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", logging.WARNING)
    monkeypatch.setattr(kso, "level", logging.NOTSET)
    assert kso_main(["scheduler", "--config", str(path), "--kubeconfig", "/nonexistent"]) == 1
    assert kso.level == logging.DEBUG  # LOG_LEVEL from --config, on kso's loggers
    assert root.level == logging.WARNING  # the libraries' (kubernetes, urllib3) stay at WARNING
    assert "kso scheduler: " in capsys.readouterr().err
