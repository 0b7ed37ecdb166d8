"""The end-to-end benchmark's processes (benchmarks.e2e, tests): kube-scheduler's configuration as deploy/ ships it,
the extenders (kso from a checkout, the trivial extender) in processes of their own with their start-up timed, and
what a process has used so far, read from /proc (CPU, RSS and its peak)."""

from __future__ import annotations

import copy
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.controlplane import Component, free_port, wait_ready
from extender.client import ExtenderClient

REPO = Path(__file__).resolve().parents[1]
DEPLOY_SCHEDULER_CONFIG = REPO / "deploy" / "scheduler-config.yaml"


def deploy_scheduler_config() -> dict[str, Any]:
    """The KubeSchedulerConfiguration embedded in deploy/scheduler-config.yaml (its ConfigMap's config.yaml)."""
    cm = yaml.safe_load(DEPLOY_SCHEDULER_CONFIG.read_text())
    return yaml.safe_load(cm["data"]["config.yaml"])


def scheduler_config(extender_url: str | None, *, bind: bool = False, node_cache: bool = True,
                     qps: int = 5000) -> dict[str, Any]:
    """deploy/'s configuration with kso at ``extender_url`` (None = no extender: kube-scheduler alone);
    ``bind`` keeps deploy/'s bindVerb, ``node_cache`` its nodeCacheCapable. qps/burst high so the client
    side of kube-scheduler is not what is measured."""
    cfg = copy.deepcopy(deploy_scheduler_config())
    cfg["clientConnection"] = {"qps": qps, "burst": qps}
    extenders = cfg.pop("extenders", [])
    if extender_url is not None:
        ext = dict(extenders[0])
        ext["urlPrefix"] = extender_url
        if not bind:
            ext.pop("bindVerb", None)
        ext["nodeCacheCapable"] = node_cache
        cfg["extenders"] = [ext]
    return cfg


def tree_env(tree: Path = REPO, **extra: str) -> dict[str, str]:
    """The environment of a process that must import kso from ``tree`` (run with cwd=tree)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


@dataclass
class ExtenderProcess:
    """An HTTP extender in its own process on 127.0.0.1; ``url`` is its urlPrefix. ``start`` records the seconds
    from the process's start to its first 200 on ``ready_path`` (polled every 0.2 s) and its CPU by then."""

    argv: list[str]
    env: dict[str, str]
    log: Path
    ready_path: str = "/readyz"
    port: int = field(default_factory=free_port)
    proc: Any = None  # subprocess.Popen[bytes] once started
    cwd: Path = REPO  # the checkout whose kso runs
    ready_s: float = math.nan
    ready_cpu_s: float = math.nan

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 240.0) -> ExtenderProcess:
        import subprocess

        # A ceiling, not a wait: ready returns at once. kso's start (imports, list of nodes and pods) took
        # over 60 s once at load 12 on the 2-core box, which failed a test module's fixture.
        with self.log.open("ab") as out:
            t0 = time.monotonic()
            self.proc = subprocess.Popen([*self.argv, str(self.port)], env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.cwd)
        comp = Component(self.log.stem, self.proc, self.log, self.port)
        wait_ready(comp, self.url + self.ready_path, timeout)
        self.ready_s, self.ready_cpu_s = time.monotonic() - t0, process_cpu_s(self)
        return self

    def get(self, path: str) -> str:
        with ExtenderClient(self.port) as client:
            status, body = client.get(path)
        if status != 200:
            raise RuntimeError(f"GET {self.url}{path}: HTTP {status}")
        return body.decode()

    def stop(self) -> None:
        if self.proc is not None:
            Component(self.log.stem, self.proc, self.log).stop()

    def __enter__(self) -> ExtenderProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def scheduler_http_timeout_s() -> str:
    """deploy/'s extender httpTimeout in seconds ("2s" -> "2"): what kso's KSO_HTTP_TIMEOUT_S must say (deploy/settings
    does), so that its Bindings end while kube-scheduler still waits."""
    text = str(deploy_scheduler_config()["extenders"][0].get("httpTimeout", "5s"))
    return str(float(text[:-1]) if text.endswith("s") and not text.endswith("ms") else float(text[:-2]) / 1e3)


def kso_process(kubeconfig: Path, log: Path, **env: str) -> ExtenderProcess:
    """``kso extender --port P`` as README says: a kubeconfig and, as deploy/settings.yaml, the scheduler's httpTimeout
    (KSO_HTTP_TIMEOUT_S, unless the variant sets it); KSO_CLUSTER_SOURCE unset. Bound to 127.0.0.1 so a test never
    opens a port beyond the machine."""
    env.setdefault("KSO_HTTP_TIMEOUT_S", scheduler_http_timeout_s())
    # KSO_BENCH_TREE=DIR (a --kso-env variant): run the kso of another checkout, e.g. the commit before a change;
    # DIR relative to the working directory (the variant's label names files, so it cannot hold a "/").
    tree = Path(env.pop("KSO_BENCH_TREE", str(REPO))).resolve()
    env.pop("KSO_BENCH_CONFIGS", None)  # which runs the variant serves (variant_configs), not a kso setting
    e = tree_env(tree, KUBECONFIG=str(kubeconfig), LOG_LEVEL="WARNING", KSO_HOST="127.0.0.1", **env)
    e.pop("KSO_CLUSTER_SOURCE", None)
    return ExtenderProcess([sys.executable, "-m", "kso.cli", "extender", "--port"], e, log, cwd=tree)


def trivial_process(log: Path) -> ExtenderProcess:
    return ExtenderProcess([sys.executable, "-m", "benchmarks.trivial_extender"], tree_env(), log, ready_path="/healthz")


def process_cpu_s(ext: ExtenderProcess | Component | None) -> float:
    """CPU seconds (user + system, all threads) the process of an extender (or of a control-plane component) has
    used so far; NaN without one."""
    return sum(process_cpu_times(ext))


def process_cpu_times(ext: ExtenderProcess | Component | None) -> tuple[float, float]:
    """(user, system) CPU seconds of that process so far, NaN without one. System time includes what the kernel
    spends delivering the process's loopback writes to their reader (the receiver's TCP stack runs in the send)."""
    if ext is None or ext.proc is None:
        return math.nan, math.nan
    import psutil

    try:
        t = psutil.Process(ext.proc.pid).cpu_times()
    except psutil.Error:
        return math.nan, math.nan
    return float(t.user), float(t.system)


@dataclass(frozen=True)
class Memory:
    """A process's resident memory, MiB: now (VmRSS), its peak so far (VmHWM), and its children's RSS now (kso's
    plan solver runs in a child: what the process costs the node is both)."""

    rss_mib: float = math.nan
    hwm_mib: float = math.nan
    children_rss_mib: float = math.nan


def process_memory(ext: ExtenderProcess | Component | None) -> Memory:
    """From /proc/PID/status (and the children's, by psutil); NaNs without a process or once it has ended."""
    if ext is None or ext.proc is None:
        return Memory()
    fields: dict[str, float] = {}
    try:
        with open(f"/proc/{ext.proc.pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    fields[key] = int(value.split()[0]) / 1024
    except OSError:
        return Memory()
    import psutil

    children = 0.0
    try:
        for child in psutil.Process(ext.proc.pid).children(recursive=True):
            try:
                children += child.memory_info().rss / 2**20
            except psutil.Error:
                pass
    except psutil.Error:
        children = math.nan
    return Memory(fields.get("VmRSS", math.nan), fields.get("VmHWM", math.nan), children)
