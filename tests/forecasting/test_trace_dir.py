"""Where the real traces are (forecasting.trace_dir): KSO_TRACE_DIR, else ../shared/data beside the checkout,
and an error naming the setting when a trace is missing, from the library, `kso forecast` and the tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forecasting.trace_dir import BESIDE_CHECKOUT, CHECKOUT, TraceFileMissing, trace_dir
from forecasting.traces import TraceError, TraceSource
from kso.cli import main
from optimizer.plan.openb import read_openb
from tests.support.fixtures import _shared, _trace_files

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_is_beside_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KSO_TRACE_DIR", raising=False)
    assert CHECKOUT == ROOT
    assert trace_dir() == BESIDE_CHECKOUT == ROOT.parent / "shared" / "data"
    monkeypatch.delenv("KSO_SHARED", raising=False)
    assert _shared() == ROOT.parent / "shared"  # the captured requests and docs of the tests, likewise
    monkeypatch.setenv("KSO_TRACE_DIR", "/somewhere/else")
    assert trace_dir() == Path("/somewhere/else")


def test_a_missing_trace_names_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KSO_TRACE_DIR", str(tmp_path))
    with pytest.raises(TraceError, match=f"KSO_TRACE_DIR={tmp_path}"):
        TraceSource("bitbrains")
    with pytest.raises(TraceFileMissing, match=r"openb-nodes.csv does not exist .*KSO_TRACE_DIR"):
        read_openb()
    assert main(["forecast", "--trace", "alibaba"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "KSO_TRACE_DIR" in err and "Traceback" not in err, err
    monkeypatch.delenv("KSO_TRACE_DIR")
    monkeypatch.setattr("forecasting.trace_dir.BESIDE_CHECKOUT", tmp_path / "shared" / "data")
    with pytest.raises(TraceError, match=r"KSO_TRACE_DIR is not set, so \.\./shared/data beside the checkout"):
        TraceSource("bitbrains")


def test_a_test_that_needs_a_missing_trace_fails_instead_of_skipping(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="KSO_TRACE_DIR"):
        _trace_files("no-such-trace.csv")


def test_no_absolute_data_folder_is_left_in_the_readers() -> None:
    files = [*(ROOT / "forecasting").rglob("*.py"), ROOT / "optimizer" / "plan" / "openb.py", *(ROOT / "scripts").rglob("*.py"),
             ROOT / "tests" / "support" / "fixtures.py", ROOT / "tests" / "forecasting" / "test_traces.py"]
    found = [f"{p.relative_to(ROOT)}: {m}" for p in files for m in re.findall(r"/work/\S*", p.read_text())]
    assert not found, found
