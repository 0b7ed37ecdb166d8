"""Everything a running extender is configured by, parsed in one place (``load_config``: the environment over a
``--config`` file) into one ``Config``: the extender's settings, every agent's parameters, the plan's settings
and, when Prometheus is in use, its settings and the forecast store's. The layers below get their part of it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from decisions.agents import AGENTS
from forecasting.source_settings import ForecastSourceSettings, prometheus_url_set
from kso.core.capacity import CapacitySettings
from kso.core.logs import LogSettings
from kso.core.settings import ConfigError, load_settings, read_config_file, setting
from optimizer.settings import PlanSettings

if TYPE_CHECKING:
    from forecasting.prometheus import PrometheusSettings
    from forecasting.store import StoreSettings

T = TypeVar("T")

# Weights of the original deployment (safe-overload 1, safe-balance 10, pigeon 10), plus kso's
# congestion and size-aware image scores at 1. They only matter relative to each other: the combined
# score is their weighted mean, on 0..10.
DEFAULT_WEIGHTS = {"safe-overload": 1, "safe-balance": 10, "pigeon-holing": 10, "congestion": 1,
                   "image-locality": 1}


@dataclass
class ExtenderSettings(ForecastSourceSettings):
    """The extender's settings; KSO_FORECAST_SOURCE is inherited (kso plan and kso reoptimize read it too)."""

    http_port: int = setting("HTTP_PORT", 80, lo=1, hi=65535,
                             help="the extender's listen port (--port; kube-safe-scheduler's name)")
    # Loopback by default: kube-scheduler calls its sidecar over 127.0.0.1, and /bind binds any pod.
    host: str = setting("KSO_HOST", "127.0.0.1", help="the extender's listen address (--host)")
    # /metrics, /healthz and /readyz (for Prometheus and the kubelet's probes); 0 = not served apart
    # (they then stay on the scheduler-facing port).
    admin_port: int = setting("KSO_ADMIN_PORT", 0, lo=0, hi=65535,
                              help="port of /metrics, /healthz and /readyz (--admin-port); 0 = on the main port")
    # Staleness of the node cache (seconds since the API server was last heard: an event, a watch bookmark,
    # which a live watch gets about once a minute, or a list). Stale: /readyz says so and a log line marks its
    # start and end, while kso keeps answering. Unready: only past the second, longer threshold, so an API
    # server restart or a watch reconnect never takes kso out of kube-scheduler's path.
    cache_stale_s: float = setting("KSO_CACHE_STALE_S", 120.0, lo=1,
                                   help="seconds without word from the API server after which /readyz reports the "
                                        "node cache stale (still 200) and a warning is logged")
    ready_max_cache_age_s: float = setting("KSO_READY_MAX_CACHE_AGE_S", 600.0, lo=0,
                                           help="seconds without word from the API server after which /readyz answers "
                                                "503; 0 = never unready for staleness")
    admin_host: str = setting("KSO_ADMIN_HOST", "127.0.0.1", help="listen address of the admin port (--admin-host)")
    # TLS on the scheduler-facing port (uvicorn's ssl options); a client CA makes a client certificate
    # signed by it mandatory (kube-scheduler's extender tlsConfig can present one).
    tls_cert_file: str = setting("KSO_TLS_CERT_FILE", "",
                                 help="TLS certificate of the main port (with KSO_TLS_KEY_FILE); empty = plain HTTP")
    tls_key_file: str = setting("KSO_TLS_KEY_FILE", "", help="TLS key of the main port")
    tls_client_ca_file: str = setting("KSO_TLS_CLIENT_CA_FILE", "",
                                      help="with TLS: clients must present a certificate signed by this CA")
    # /debug/*: OFF, LOOPBACK (answered to clients on 127.0.0.1 / ::1 only) or ON.
    debug_routes: str = setting("KSO_DEBUG_ROUTES", "LOOPBACK", kind="choice:OFF,LOOPBACK,ON",
                                help="/debug/*: OFF, LOOPBACK (clients on 127.0.0.1 / ::1 only), ON")
    # Seconds a client may take to send a request's headers, then its body; the connection is closed after.
    header_timeout_s: float = setting("KSO_HEADER_TIMEOUT_S", 5.0, lo=0.1,
                                      help="a client taking longer to send a request's headers is disconnected, seconds")
    body_timeout_s: float = setting("KSO_BODY_TIMEOUT_S", 30.0, lo=0.1, help="the same for the request's body, seconds")
    # Connections and requests served at once; beyond it uvicorn answers 503 (with KSO_MAX_BODY_BYTES this
    # bounds the memory bodies can take: 512 x 1 MiB). kube-scheduler binds each pod in its own goroutine,
    # so with kso binding hundreds of calls can be in flight; a 503 on an ignorable extender's filter makes
    # kube-scheduler place the pod without kso (32 let pods onto nodes kso rejects, end to end).
    max_connections: int = setting("KSO_MAX_CONNECTIONS", 512, lo=1,
                                   help="connections and requests served at once; beyond it uvicorn answers 503")
    # Binds in flight to the API server at once (the others wait for a slot, in arrival order). The name is
    # historical: binds were posted from this many threads; they now run on the event loop (kubernetes.aio), so a
    # bind in flight costs a connection, not a thread. kube-scheduler binds each pod in its own goroutine, so at its
    # peak hundreds of binds arrive within one Binding's round trip: end to end on a 2-core control plane, 16 slots
    # made kso refuse most binds that the API server had room for, 64 and 256 refused none; at a saturated API server
    # more slots turn refusals (kube-scheduler binds at once) into Bindings that outlive the httpTimeout (kube-scheduler
    # binds after the whole wait; benchmarks/e2e.py and benchmarks/figures/e2e-100n-1000p-bind-*.txt). Keep it at
    # most a quarter of KSO_MAX_CONNECTIONS: the binds waiting for a slot take up to half of it.
    bind_threads: int = setting("KSO_BIND_THREADS", 64, lo=1, hi=256,
                                help="binds in flight to the API server at once (the rest wait in arrival order); a bind in "
                                     "flight is a connection, not a thread")
    # A bind still waiting for a bind slot this long after it arrived is not posted but answered with an error:
    # kube-scheduler stops waiting at its extender httpTimeout (deploy/scheduler-config.yaml: 2 s) and, the
    # extender being ignorable, binds the pod itself; a Binding kso posted after that only races its binder. 1.5 s
    # leaves the last 0.5 s of the 2 for the Binding's own round trip (which reaches a second at the p99 on a
    # saturated control plane). A bind that would not get a slot in that time, by the binds ahead of it and the recent
    # binds' duration, is refused at once. Keep it under the httpTimeout of the scheduler configuration in use.
    bind_max_wait_s: float = setting("KSO_BIND_MAX_WAIT_S", 1.5, lo=0.01,
                                     help="a bind still waiting for a bind slot this long is answered with an error, not posted"
                                          " (kube-scheduler then binds the pod itself); keep it under the extender's "
                                          "httpTimeout, seconds")
    # kube-scheduler's extender httpTimeout (its configuration's extenders[].httpTimeout; 5 s unless set there,
    # kube-scheduler's DefaultExtenderTimeout): a bind's API calls end by this long after the bind arrived, so that kso
    # never binds after kube-scheduler has stopped waiting and bound the pod itself. Set it to the scheduler
    # configuration's value (deploy/: 2 s).
    http_timeout_s: float = setting("KSO_HTTP_TIMEOUT_S", 5.0, lo=0.1,
                                    help="kube-scheduler's extender httpTimeout: a bind's API calls end within it, seconds")
    url_prefix: str = setting("KSO_URL_PREFIX", "", help="prefix of /filter, /prioritize, /bind, /preempt")
    agents: list[str] = setting("KSO_AGENTS", ["safe", "pigeon", "congestion", "image"], kind="list",
                                help="the agents enabled (safe, pigeon, congestion, image, cost)")
    weights: dict[str, int] = setting("KSO_WEIGHTS", DEFAULT_WEIGHTS, kind="weights",
                                      help="priorities in the combined score and their weights")
    # Predicates used by the combined /filter; empty = every predicate of the enabled agents.
    filters: list[str] = setting("KSO_FILTERS", [], kind="list",
                                 help="predicates of the combined /filter; empty = every predicate of the enabled agents")
    # See before you pack (decisions/sight.py): kso's packing priorities and the plan pull pods only onto nodes whose
    # load is measured, and not past this share of allocatable bound there since the statistics last saw the node.
    pack_unseen_max: int = setting("KSO_PACK_UNSEEN_MAX", 25, kind="percent",
                                   help="packing (pigeon-holing, the plan) pulls pods only onto nodes with load statistics "
                                        "and at most this percent of allocatable bound there but not yet in the statistics")
    # Bounds on one request, checked before any work: a request past one is a 400 naming the setting.
    # 1 MiB holds KSO_MAX_NODES node names (nodeCacheCapable: true, ~130 KiB) with room, or 300-1,000 full
    # Node objects (nodeCacheCapable: false). Parsing a body holds the interpreter in one piece (orjson), and
    # /healthz and every other call wait that long (benchmarks/adversarial.py measures it), so
    # full-node mode on a bigger cluster raises this knowingly.
    max_body_bytes: int = setting("KSO_MAX_BODY_BYTES", 1024 * 1024, lo=1024,
                                  help="a larger request body is a 400 (full-node mode on more than a few hundred nodes needs "
                                       "more)")
    max_json_depth: int = setting("KSO_MAX_JSON_DEPTH", 100, lo=8, hi=250, help="nesting depth of a request body")
    max_nodes: int = setting("KSO_MAX_NODES", 10_000, lo=1, help="nodes named in one request")
    max_names_per_node: int = setting("KSO_MAX_NAMES_PER_NODE", 4_096, lo=1,
                                      help="labels, annotations, taints and image names of one Node")
    max_resources_per_node: int = setting("KSO_MAX_RESOURCES_PER_NODE", 64, lo=5, help="resources of one Node in a request body")
    max_resource_columns: int = setting("KSO_MAX_RESOURCE_COLUMNS", 256, lo=8,
                                        help="resource names the node cache tracks; past it unused ones are dropped, then new "
                                             "ones ignored")
    max_pod_annotation_bytes: int = setting("KSO_MAX_POD_ANNOTATION_BYTES", 16_384, lo=0,
                                            help="annotation bytes kept per remembered pod (largest dropped first)")
    # Bodies above this many bytes are parsed and answered on a worker thread, off the event loop.
    offload_body_bytes: int = setting("KSO_OFFLOAD_BODY_BYTES", 256 * 1024, lo=0,
                                      help="larger bodies are answered on a worker thread")
    cluster_source: str = setting("KSO_CLUSTER_SOURCE", "auto", kind="choice:AUTO,API,SNAPSHOT,DEMO",
                                  help="where the node cache comes from; AUTO = API in a pod or with a kubeconfig, else the "
                                       "embedded demo (with a warning)")
    snapshot_path: str = setting("KSO_SNAPSHOT", "", help="cluster snapshot file for KSO_CLUSTER_SOURCE=SNAPSHOT (--snapshot)")
    kubeconfig: str = setting("KUBECONFIG", "", help="kubeconfig path; empty = in-cluster, then ~/.kube/config")
    cache_sync_timeout_s: float = setting("KSO_CACHE_SYNC_TIMEOUT_S", 60.0, lo=0,
                                          help="kso scheduler waits this long for the first list of nodes and pods, then "
                                               "schedules from what is listed, seconds")
    forecast_model: str = setting("KSO_FORECAST_MODEL", "", help="forecaster name; empty = the default")


@dataclass
class Config:
    settings: ExtenderSettings
    agent_params: dict[str, Any] = field(default_factory=dict)
    plan: PlanSettings = field(default_factory=PlanSettings)
    capacity: CapacitySettings = field(default_factory=CapacitySettings)  # the capacity signal (KSO_CAPACITY_*)
    logs: LogSettings = field(default_factory=LogSettings)  # LOG_LEVEL, KSO_LOG_FORMAT
    # Prometheus is in use when KSO_PROMETHEUS_URL is set (environment or file) or KSO_FORECAST_SOURCE is
    # PROMETHEUS (then at its default URL): its settings, else None. The plan's re-solve then counts new pods
    # at their siblings' measured usage.
    prometheus: PrometheusSettings | None = None
    # The forecast store's settings when the safe agent uses forecasts (KSO_FORECAST_SOURCE PROMETHEUS, or
    # AUTO with Prometheus in use), else None (node annotations only).
    store: StoreSettings | None = None
    # Where this config was read from (the environment, the file's values), so that a layer above reads its
    # own settings class from the same place (``load``: kso scheduler's SchedulerSettings).
    env: Mapping[str, str] = field(default_factory=dict)
    file_values: Mapping[str, Any] = field(default_factory=dict)

    def load(self, cls: type[T]) -> T:
        """``cls`` (a settings dataclass) from this config's environment over its file."""
        return load_settings(cls, self.env, self.file_values)

    def validate(self) -> list[str]:
        """Problems that make the configuration unusable, each a sentence."""
        problems = [f"KSO_AGENTS names unknown agent {a!r} (known: {', '.join(AGENTS)})"
                    for a in self.settings.agents if a not in AGENTS]
        return problems


def load_config(env: Mapping[str, str] | None = None, config_file: str | None = None) -> Config:
    """The one place the extender's configuration is read: ``env`` (default the process's) over the file
    (``config_file``, else KSO_CONFIG). Forecasting's settings are imported only when Prometheus is in use."""
    env = dict(os.environ if env is None else env)
    config = Config(ExtenderSettings(), env=env, file_values=read_config_file(config_file or env.get("KSO_CONFIG")))
    problems: dict[str, None] = {}  # every bad value once, though several classes read it (U*, eps)

    def load(cls: type[T]) -> T:
        try:
            return config.load(cls)
        except ConfigError as exc:
            problems.update(dict.fromkeys(str(exc).split("; ")))
            return cls()

    config.settings = load(ExtenderSettings)
    config.agent_params = {name: load(cls.Params) for name, cls in AGENTS.items()}
    config.plan = load(PlanSettings)
    config.logs = load(LogSettings)
    config.capacity = load(CapacitySettings)
    url_set = prometheus_url_set(config.env, config.file_values)
    if url_set or config.settings.forecast_source.upper() == "PROMETHEUS":
        from forecasting.prometheus import PrometheusSettings

        config.prometheus = load(PrometheusSettings)
        if config.settings.forecasts_from_prometheus(url_set):
            from forecasting.store import StoreSettings

            config.store = load(StoreSettings)
    if problems:
        raise ConfigError("; ".join(problems))
    return config
