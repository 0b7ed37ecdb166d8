"""KSO_CLUSTER_SOURCE: its default ("auto") means AUTO. It used to be compared with "AUTO" as is, so kso
started as README says (a kubeconfig, the variable unset) served the embedded demo cluster. The real
API-server path is covered end to end in tests/e2e/test_kube_scheduler_extender.py (0 unknown nodes)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from extender.config import load_config
from extender.server import choose_source


def test_unset_source_with_a_kubeconfig_is_the_api_server(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    assert choose_source(load_config({"KUBECONFIG": str(kubeconfig)})) == "API"


@pytest.mark.parametrize("value", ["auto", "Auto", "AUTO"])
def test_auto_in_any_case_without_a_cluster_is_the_demo_with_a_warning(value: str, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with caplog.at_level(logging.WARNING, logger="kso.extender"):
        source = choose_source(load_config({"KSO_CLUSTER_SOURCE": value, "KUBECONFIG": str(tmp_path / "none")}))
    assert source == "DEMO"
    assert "DEMO cluster" in caplog.text and "KSO_CLUSTER_SOURCE=API" in caplog.text


def test_explicit_sources_are_kept() -> None:
    assert choose_source(load_config({"KSO_CLUSTER_SOURCE": "snapshot"})) == "SNAPSHOT"
    assert choose_source(load_config({"KSO_CLUSTER_SOURCE": "API"})) == "API"
