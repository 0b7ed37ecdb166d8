"""kso.core.logs: one format for kso's lines, uvicorn's and the libraries' (text, or one JSON object per line
with --log-format json / KSO_LOG_FORMAT), and log lines without Python reprs."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.adversarial import ExtenderProcess, post
from kso.core.logs import JsonFormatter, fields
from tests.support.fixtures import until

ROOT = Path(__file__).resolve().parents[2]
TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (TRACE|DEBUG|INFO|WARNING|ERROR|ALERT|CRITICAL) [\w.]+: \S")


def _records(text: str, log_format: str) -> list[dict[str, str]]:
    """Every line of ``text`` as (level, logger, msg); fails on a line that is not in ``log_format``."""
    out = []
    for line in text.splitlines():
        if log_format == "json":
            record = json.loads(line)
            assert set(record) >= {"ts", "level", "logger", "msg"}, line
            out.append(record)
        else:
            assert TEXT_LINE.match(line), f"not kso's text format: {line!r}"
            _, _, level, rest = line.split(" ", 3)
            logger, _, msg = rest.partition(": ")
            out.append({"level": level, "logger": logger, "msg": msg})
    return out


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_kso_and_uvicorn_lines_share_one_format(log_format: str) -> None:
    env = {"LOG_LEVEL": "INFO", "KSO_PLAN_POLICY": "binpack", "KSO_LOG_FORMAT": log_format}
    with ExtenderProcess(env=env) as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw:  # uvicorn's own warning
            raw.sendall(b"\x16\x03\x01 not HTTP\r\n\r\n")
            raw.recv(1024)
        assert post(srv.port, "/filter", b"{bad")[0] == 400  # a kso warning
        until(lambda: "installed" in srv.log() and "Invalid HTTP request" in srv.log(), 60, "the plan and uvicorn's line")
        text = srv.log()
    records = _records(text, log_format)
    loggers = {r["logger"] for r in records}
    assert {"kso.extender", "kso.extender.http", "kso.plan", "uvicorn.error"} <= loggers, loggers
    installed = [r["msg"] for r in records if "installed" in r["msg"]]
    assert installed and not re.search(r"[{}\[\]']", installed[0]), installed  # no Python dict in the line
    assert "policy=binpack" in installed[0] and "status=" in installed[0]


def test_the_error_that_ends_a_command_is_a_json_record_too() -> None:
    proc = subprocess.run([sys.executable, "-m", "kso.cli", "plan", "--snapshot", "nope.json", "--log-format", "json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    [record] = _records(proc.stderr, "json")
    assert record["level"] == "ERROR" and "nope.json" in record["msg"]


def test_a_json_record_with_a_traceback_is_one_line() -> None:
    try:
        raise ValueError("two\nlines")
    except ValueError:
        record = logging.LogRecord("kso.x", logging.ERROR, __file__, 1, "failed: %s", ("why",), sys.exc_info())
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["msg"] == "failed: why" and "ValueError: two\nlines" in parsed["exc"]


def test_fields_write_values_not_reprs() -> None:
    assert fields({"agents": ["safe", "image"], "weights": {"a": 1}, "gap": 0.000592883, "none": [], "ok": True}) == (
        "agents=safe,image weights=a=1 gap=0.0005929 none=- ok=True")


def test_a_command_run_in_a_test_leaves_no_handler_on_a_closed_stream(tmp_path: Path) -> None:
    """``kso scheduler`` run in-process installs kso's handler on the test's captured stderr and kso's loggers at
    INFO; the shared fixtures undo both when the test ends, so a record logged afterwards (here by a thread in the
    next test, as a watcher's "listed 0 pods" once was) is not a "Logging error" on a closed file."""
    (tmp_path / "test_first.py").write_text(
        "from kso.cli import main\n\n\n"
        "def test_runs_a_command(capsys, tmp_path):\n"
        "    assert main(['scheduler', '--kubeconfig', str(tmp_path / 'none')]) == 1\n")
    (tmp_path / "test_second.py").write_text(
        "import logging\nimport threading\n\n\n"
        "def test_a_thread_logs():\n"
        "    t = threading.Thread(target=logging.getLogger('kso.core.watcher').warning, args=('listed 0 pods',))\n"
        "    t.start()\n    t.join()\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.support.fixtures", "-p", "no:randomly",
                           "-p", "no:cacheprovider", "-s", "-q", "--rootdir", str(tmp_path), "-c", "/dev/null",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Logging error" not in proc.stderr and "closed file" not in proc.stderr, proc.stderr[-3000:]


def test_first_warnings_warn_once_per_kind_then_debug(caplog: pytest.LogCaptureFixture) -> None:
    from kso.core.logs import FirstWarnings

    logger = logging.getLogger("kso.test.first")
    warnings = FirstWarnings(logger)
    with caplog.at_level(logging.DEBUG, logger="kso.test.first"):
        for kind in (403, 403, 500, 403, 500):
            warnings.log(kind, "refused %s", kind)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "refused 403"), (logging.DEBUG, "refused 403"), (logging.WARNING, "refused 500"),
        (logging.DEBUG, "refused 403"), (logging.DEBUG, "refused 500")]
