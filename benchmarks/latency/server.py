"""The extender under test: ``python -m kso.cli extender`` in its own process, and its /metrics."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import psutil

from benchmarks.e2e import tree_env
from benchmarks.latency.cluster import REPO
from benchmarks.prometheus_text import Scrape, histogram, parse_metrics
from extender.client import ExtenderClient
from kso.core.net import free_port

HTTP_TIMEOUT_S = 5.0  # kube-scheduler's default extender httpTimeout
DEFAULT_MAX_BODY = 1024 * 1024  # the server's KSO_MAX_BODY_BYTES default (extender/config.py)
REQUEST_SECONDS = "kso_extender_request_duration_seconds"  # the server's histogram of each verb's time


class Server:
    """``python -m kso.cli extender`` in its own process, on a snapshot file, from ``tree`` (this checkout
    by default)."""

    def __init__(self, snapshot: Path, agents: str | None, max_body: int, log: Path, tree: Path = REPO) -> None:
        self.port = free_port()
        env = tree_env(tree, LOG_LEVEL="WARNING")
        if max_body > DEFAULT_MAX_BODY:
            env["KSO_MAX_BODY_BYTES"] = str(max_body)
        cmd = [sys.executable, "-m", "kso.cli", "extender", "--snapshot", str(snapshot), "--host", "127.0.0.1",
               "--port", str(self.port)]
        if agents:
            cmd += ["--agents", agents]
        self.cmd = cmd
        self.tree = tree
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.proc.pid)

    def wait_ready(self, timeout: float = 300.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                with ExtenderClient(self.port, timeout=2) as client:
                    status, body = client.get("/readyz")
                if status == 200:
                    return dict(orjson.loads(body))
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server not ready in time")

    def cpu_seconds(self) -> float:
        """CPU time the server's main thread (the event loop, which answers every call) has run so far: from
        /proc/PID/schedstat in nanoseconds where Linux has it (psutil's process times tick in 10 ms), else
        the whole process's user + system time."""
        try:
            return int(Path(f"/proc/{self.proc.pid}/schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            t = self.ps.cpu_times()
            return float(t.user + t.system)

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)

    def metrics(self) -> Scrape:
        """The server's /metrics now."""
        with ExtenderClient(self.port) as client:
            status, body = client.get("/metrics")
        if status != 200:
            raise RuntimeError(f"GET /metrics: HTTP {status}")
        return parse_metrics(body.decode())

    def stop(self) -> None:
        try:
            children = self.ps.children(recursive=True)
        except psutil.Error:
            children = []
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # The extender's plan solver pool (a spawned process) outlives a SIGTERMed server, idle but forever:
        # end this server's own children so repeated runs do not pile them up.
        for child in children:
            try:
                child.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(children, timeout=5)
        for child in alive:
            try:
                child.kill()
            except psutil.Error:
                pass
        self._log.close()


def server_delta(before: Scrape, after: Scrape, verb: str) -> tuple[float, float]:
    """(server mean ms for the verb, server-side error count) between two /metrics scrapes."""
    mean = histogram(after, REQUEST_SECONDS, before, verb=verb).mean * 1e3
    return mean, after.total("kso_extender_errors_total") - before.total("kso_extender_errors_total")


def server_p99(before: Scrape, after: Scrape, verb: str) -> float:
    """The server's own p99 for the verb between two /metrics scrapes, in ms (benchmarks.prometheus_text's
    quantile rule: at bucket resolution)."""
    return histogram(after, REQUEST_SECONDS, before, verb=verb).quantile(0.99) * 1e3
