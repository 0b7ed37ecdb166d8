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
