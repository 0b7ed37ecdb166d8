"""kso.core.settings and the configuration check of every command (kso.cli.check_configuration): a named
config file must exist, unknown names are errors with a suggestion, bad values are errors wherever they come
from, and docs/configuration.md's table is ``kso settings``'s output."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from extender.config import load_config
from kso.cli import DEVELOPMENT_VARIABLES, check_configuration, main, settings_sections
from kso.core.settings import ConfigError, markdown_table, read_config_file, settings_fields
from tests.support.layout import PACKAGES

ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def test_a_named_config_file_must_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="config file nope.yaml: No such file"):
        read_config_file("nope.yaml")
    code, err = _run(["plan", "--demo", "--config", "nope.yaml", "--out", str(tmp_path / "plan.json")], capsys)
    assert code == 2 and err == "kso plan: configuration error: config file nope.yaml: No such file or directory\n"
    assert not (tmp_path / "plan.json").exists()


def test_the_config_file_of_kso_config_must_exist_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSO_CONFIG", "nope.yaml")
    with pytest.raises(ConfigError, match="nope.yaml"):
        check_configuration(None)
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_config()


def test_the_configuration_check_imports_no_scipy() -> None:
    """Every command runs the check first: scipy is imported where a risk or a forecast is computed, not with the
    modules whose settings the check reads."""
    code = ("import sys\nfrom kso.cli import check_configuration\ncheck_configuration(None, {})\n"
            "print(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("text", ["[1, 2]\n", "a: [\n", "- KSO_AGENTS\n"])
def test_a_config_file_that_is_not_a_mapping_is_an_error(text: str, tmp_path: Path) -> None:
    path = tmp_path / "kso.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"config file {path}"):
        read_config_file(path)


def test_an_unknown_kso_variable_is_an_error_with_a_suggestion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KSO_PLAN_POLCY", "load-balance")
    code, err = _run(["plan", "--demo", "--out", str(tmp_path / "plan.json")], capsys)
    assert code == 2, err
    assert err == ("kso plan: configuration error: the environment names a setting kso does not read: "
                   "KSO_PLAN_POLCY (did you mean KSO_PLAN_POLICY?)\n")


def test_an_unknown_key_of_the_config_file_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "kso.yaml"
    path.write_text("KSO_PLAN_POLICY: load-balance\nSAFEUTILISATION: 80\n")
    with pytest.raises(ConfigError, match=r"config file .* SAFEUTILISATION \(did you mean SAFEUTILIZATION\?\)"):
        check_configuration(str(path), {})


@pytest.mark.parametrize(("env", "file_text", "expected"), [
    ({"KSO_PLAN_POLICY": "load-balanse"}, "",
     "KSO_PLAN_POLICY='load-balanse' (environment): not one of BINPACK, LOAD-BALANCE, CONSOLIDATE, A-BINPACK, COST, "
     "NONE (did you mean LOAD-BALANCE?)"),
    ({}, "KSO_PLAN_POLICY: binpak\n", "KSO_PLAN_POLICY='binpak' (config file): not one of BINPACK"),
    ({"SAFEUTILIZATION": "150"}, "", "SAFEUTILIZATION='150' (environment): not an integer percentage 0..100"),
    ({"HTTP_PORT": "http"}, "", "HTTP_PORT='http' (environment): not an integer"),
    ({"KSO_SOLVER_GAP": "2"}, "", "KSO_SOLVER_GAP='2' (environment): outside 0..1"),
    ({"LOG_LEVEL": "verbose"}, "", "LOG_LEVEL='verbose' (environment): not one of TRACE, DEBUG, INFO"),
    # a setting of another command is checked too: one rule, whichever command runs
    ({"KSO_SCHEDULER_ORDER": "lifo"}, "", "KSO_SCHEDULER_ORDER='lifo' (environment): not one of QOS, FIFO, PRIORITY"),
])
def test_a_bad_value_is_an_error_naming_what_the_setting_accepts(env: dict[str, str], file_text: str, expected: str,
                                                                 tmp_path: Path) -> None:
    path = tmp_path / "kso.yaml"
    path.write_text(file_text)
    with pytest.raises(ConfigError) as bad:
        check_configuration(str(path), env)
    assert expected in str(bad.value)


def test_a_bad_value_read_by_two_classes_is_named_once() -> None:
    with pytest.raises(ConfigError) as bad:
        check_configuration(None, {"SAFEPERCENTILE": "x", "KSO_SOLVER_WORKERS": "0"})
    assert str(bad.value).count("SAFEPERCENTILE") == 1 and "KSO_SOLVER_WORKERS='0'" in str(bad.value)


def test_lists_and_weights_may_be_written_as_yaml(tmp_path: Path) -> None:
    path = tmp_path / "kso.yaml"
    path.write_text("KSO_AGENTS: [safe, pigeon]\nKSO_WEIGHTS: {safe-balance: 3, pigeon-holing: 1}\n"
                    "KSO_PLAN_WITHOUT_STATISTICS: true\n")
    check_configuration(str(path), {})
    config = load_config({}, str(path))
    assert config.settings.agents == ["safe", "pigeon"]
    assert config.settings.weights == {"safe-balance": 3, "pigeon-holing": 1}
    assert config.plan.plan_without_statistics is True


def test_kubernetes_service_variables_and_development_variables_are_not_settings() -> None:
    check_configuration(None, {"KSO_METRICS_SERVICE_HOST": "10.0.0.1", "KSO_METRICS_SERVICE_PORT": "10251",
                               "KSO_METRICS_SERVICE_PORT_METRICS": "10251", "KSO_METRICS_PORT": "tcp://10.0.0.1:10251",
                               "KSO_METRICS_PORT_10251_TCP": "tcp://10.0.0.1:10251",
                               "KSO_METRICS_PORT_10251_TCP_ADDR": "10.0.0.1", "KSO_REQUIRE_K8S": "1"})
    # A typo that only looks like a Service's port variable is still caught (its value is not a Service URL).
    with pytest.raises(ConfigError, match=r"KSO_ADMN_PORT \(did you mean KSO_ADMIN_PORT\?\)"):
        check_configuration(None, {"KSO_ADMN_PORT": "10251"})


def _source_files() -> list[Path]:
    return [p for pkg in (*PACKAGES, "scripts")
            for p in sorted((ROOT / pkg).rglob("*.py"))]


def test_every_declared_setting_is_in_the_table_with_a_meaning() -> None:
    """settings_sections() lists every settings class: a class added without a line there would be missing from
    the check (its variables reported unknown) and from the table."""
    declared = {name for path in _source_files()
                for name in re.findall(r'setting\(\s*"([A-Z][A-Z0-9_]*)"', path.read_text())}
    fields = settings_fields([cls for _, section in settings_sections() for cls in section])
    listed = {f.metadata["env"] for _, f in fields}
    assert declared == listed
    assert not [f.metadata["env"] for _, f in fields if not f.metadata["help"]]


def test_every_kso_variable_the_code_reads_is_declared() -> None:
    """A KSO_* name the code reads that is neither a setting nor a development variable would be refused by
    check_configuration."""
    fields = settings_fields([cls for _, section in settings_sections() for cls in section])
    known = {f.metadata["env"] for _, f in fields} | DEVELOPMENT_VARIABLES
    tests = [p for p in sorted((ROOT / "tests").rglob("*.py")) if p != Path(__file__).resolve()]  # its typos are meant
    used = {name for path in _source_files() + tests
            for name in re.findall(r'"(KSO_[A-Z0-9_]+)"', path.read_text())}
    assert used - known == set()


def test_the_configuration_table_is_kso_settings_output(capsys: pytest.CaptureFixture[str]) -> None:
    readme = (ROOT / "docs" / "configuration.md").read_text()
    found = re.search(r"<!-- settings table:[^\n]*-->\n(.*?)<!-- end of the settings table -->", readme, re.S)
    assert found, "docs/configuration.md lost its settings-table markers"
    assert main(["settings"]) == 0
    printed = capsys.readouterr().out
    assert printed == markdown_table(settings_sections())
    assert found.group(1) == printed, "docs/configuration.md is out of date: paste the output of `kso settings`"
