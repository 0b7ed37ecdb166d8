"""Wiring: choose the cluster source and binder, build the Extender and its app, and serve it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decisions.forecasts import forecast_health, start_forecasts
from decisions.recent import recent_bind_hold_s
from extender.config import Config
from extender.plan_jobs import make_plan_cache, start_plan_jobs
from extender.verbs import Extender
from kso.core.cluster import ClusterState
from kso.core.logs import configure_logging, uvicorn_level
from kso.core.objects import PodMemo
from kso.core.snapshot import load_snapshot
from kso.core.stats import NodeStatsSource

log = logging.getLogger("kso.extender")


@dataclass
class Running:
    extender: Extender
    stop: list[Callable[[], Any]] = field(default_factory=list)
    api_client: Any = None  # the kubernetes ApiClient when the cluster source is the API server

    def close(self) -> None:
        # Last started, first stopped: the plan jobs stop before the solver they call.
        for fn in reversed(self.stop):
            fn()


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def choose_source(config: Config) -> str:
    s = config.settings
    # Upper-cased here: a value from the environment is normalised by its parser, the default is not.
    source = s.cluster_source.upper()
    if source != "AUTO":
        return source
    if s.snapshot_path:
        return "SNAPSHOT"
    kubeconfig = s.kubeconfig or str(Path.home() / ".kube" / "config")
    if _in_cluster() or Path(kubeconfig).exists():
        return "API"
    log.warning("NO CLUSTER FOUND (not in a pod, no kubeconfig at %s, no KSO_SNAPSHOT): serving the embedded "
                "DEMO cluster, so every real node kube-scheduler asks about is unknown and passed unjudged; "
                "set KSO_CLUSTER_SOURCE=API to insist on an API server", kubeconfig)
    return "DEMO"


def build(config: Config, stats: NodeStatsSource | None = None, state: ClusterState | None = None) -> Running:
    """Create the node cache from the configured source and the Extender on top of it."""
    # the kubernetes client is only needed here, not by the agents
    from kso.core import kube
    from kso.core.binder import ApiBinder, RecordingBinder
    from kso.core.watcher import ClusterWatcher

    problems = config.validate()
    if problems:
        raise SystemExit("kso: bad configuration: " + "; ".join(problems))
    s = config.settings
    if state is None:
        state = ClusterState(max_resource_columns=s.max_resource_columns, max_pod_annotation_bytes=s.max_pod_annotation_bytes)
    source = choose_source(config)
    stop: list[Callable[[], Any]] = []
    binder: Any
    client: Any = None
    pod_memo = PodMemo()
    if source == "API":
        try:
            client = kube.load_api_client(config.settings.kubeconfig or None)
        except kube.KubeConfigError as exc:
            raise SystemExit(f"kso: cannot reach the API server ({exc}); use --snapshot or --demo to run offline") from None
        watcher = ClusterWatcher(state, client, pod_memo=pod_memo, freeze_after_list=True)  # gc as below
        watcher.start()
        stop.append(watcher.stop)
        # Binds on the serving loop (kubernetes.aio), a connection for each of the KSO_BIND_THREADS in flight.
        binder = ApiBinder(client, pool_size=s.bind_threads)
    else:
        load_snapshot(config.settings.snapshot_path or None if source == "SNAPSHOT" else None, state)
        binder = RecordingBinder()
    log.info("node cache source: %s", source)
    if stats is None:
        started = start_forecasts(config)
        if started is not None:
            stats, stop_forecasts = started
            stop.append(stop_forecasts)
    state.recent_window_s = recent_bind_hold_s(config)
    plan = make_plan_cache(config, state)
    # API mode: the watched cache is the only source of cluster state (request bodies never write it).
    extender = Extender(config, state, binder, stats, plan, cache_bodies=source != "API", pod_memo=pod_memo)
    # where each node's load data comes from, the forecasts' age and failed refreshes: /metrics and /readyz
    extender.forecast_health = forecast_health(extender, state, config.prometheus.url if config.prometheus else "")
    if extender.forecast_health is not None:
        extender.forecast_health.register(extender.metrics.registry)
    if plan is not None:
        plan.on_event = extender.metrics.plan_event
        plan.load_file()  # a restarted extender answers from the last plan at once
    if config.capacity.enabled:
        from decisions.capacity import start_capacity_signal

        stop.append(start_capacity_signal(extender, state, client, config.capacity))
    return Running(extender, stop, client)




MAX_HEAD_BYTES = 64 * 1024  # request line and headers of one request
HELD_HEAD_BYTES = 4096  # a response head held back to leave in one write with its body


class HeadWithBodyTransport:
    """A connection's transport whose response heads leave with the body that follows them, in one writev.

    uvicorn writes an ASGI response's head (http.response.start) and its body in two transport.write
    calls: on loopback with TCP_NODELAY that is two segments, two syscalls and two wake-ups of
    kube-scheduler for every call. A small write ending a head (CRLF CRLF) is held here until the next
    write (joined into one writelines: one writev, no copy) and in any case until the event loop's next
    iteration (call_soon), so nothing is ever held longer than the current step; close and write_eof
    send it first, abort drops it. Everything else is the wrapped transport's."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.writelines((held, data))
        elif len(data) <= HELD_HEAD_BYTES and data.endswith(b"\r\n\r\n"):
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        self.flush()
        self._transport.writelines(chunks)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def timed_protocol(header_timeout_s: float, body_timeout_s: float, answer_now: dict[str, Any] | None = None,
                   answer_now_bytes: int = 0) -> type:
    """uvicorn's httptools protocol with a deadline per request: its headers must arrive within
    header_timeout_s of its first byte (or of the connection), its body within body_timeout_s of the
    headers; otherwise the connection is closed. uvicorn only times out idle keep-alive connections, so a
    client sending a byte a second would hold a connection (and its buffered body) for ever.

    ``answer_now``: path -> a route with ``respond_now(body, start) -> (payload, status)`` (app.VerbRoute: the
    filter and prioritize verbs, answered on the event loop for a small body). A plain HTTP/1.1 POST to one of
    these exact paths with a Content-Length of at most ``answer_now_bytes``, on a connection with no request in
    progress, is answered by the protocol itself once its body is in: the same handler and the same response
    bytes as through the ASGI app, without uvicorn's per-request cycle, task, event and ASGI messages (most of
    the CPU such a call costs besides the decision). Any other request takes uvicorn's path."""
    from uvicorn import __version__ as uvicorn_version
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from extender.app import JSON_BYTES

    try:  # uvicorn's status lines, as its ASGI path writes them
        from uvicorn.protocols.http.httptools_impl import STATUS_LINE
    except ImportError:
        STATUS_LINE = None  # noqa: N806 - uvicorn's name
    now_routes = answer_now or {}
    # The fast path's reason to be off (uvicorn's internals not as it reads them), once found; empty: on.
    disabled: list[str] = []
    if now_routes and (STATUS_LINE is None or not callable(getattr(HttpToolsProtocol, "on_response_complete", None))):
        disabled.append("uvicorn.protocols.http.httptools_impl lacks STATUS_LINE or on_response_complete")
        log.warning("answering filter and prioritize in the HTTP protocol is off: this uvicorn (%s) lacks what it "
                    "reads; every request takes uvicorn's ASGI path", uvicorn_version)

    class TimedHttpToolsProtocol(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None
        # (route, uvicorn's default headers, start, body so far) of a request answer_now serves, from its headers
        # to its answer
        _now: tuple[Any, Any, float, bytearray] | None = None
        _now_close = False  # the server is shutting down: close once that request is answered

        def _arm(self, seconds: float) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            log.debug("closing a connection that sent no complete request in time")
            self.transport.close()

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(HeadWithBodyTransport(transport, self.loop))
            self._arm(header_timeout_s)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_bytes = 0
            if self._deadline is None:
                self._arm(header_timeout_s)

        def _count(self, n: int) -> None:
            # httptools keeps every header uvicorn is given: bound them as most servers do.
            self._head_bytes = getattr(self, "_head_bytes", 0) + n
            if self._head_bytes > MAX_HEAD_BYTES:
                log.debug("closing a connection whose request line and headers passed %d bytes", MAX_HEAD_BYTES)
                self.transport.close()

        def on_url(self, url: bytes) -> None:
            self._count(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value))
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            found = self._now_route() if now_routes else None
            if found is not None:
                self._now = (found[0], found[1], time.perf_counter(), bytearray())
            else:
                super().on_headers_complete()
            self._arm(body_timeout_s)

        def _now_route(self) -> tuple[Any, Any] | None:
            """(the answer_now route, uvicorn's default headers) of the request whose headers are in, or None
            (uvicorn's path). Reads uvicorn's internals: should a release rename one, the fast path turns itself
            off (logged once) and uvicorn serves every request as before."""
            if disabled:
                return None
            try:
                route = self._now_route_of_request()
                return None if route is None else (route, self.server_state.default_headers)
            except AttributeError as exc:
                disabled.append(str(exc))
                log.warning("answering filter and prioritize in the HTTP protocol is off: this uvicorn (%s) lacks "
                            "what it reads (%s); every request takes uvicorn's ASGI path", uvicorn_version, exc)
                return None

        def _now_route_of_request(self) -> Any:
            parser = self.parser
            if (parser.get_method() != b"POST" or parser.get_http_version() != "1.1" or parser.should_upgrade()
                    or self.root_path or self.expect_100_continue or self.transport.is_closing()):
                return None
            if self.cycle is not None and not self.cycle.response_complete:
                return None  # a request in progress on this connection: pipelined ones queue behind it
            limit = self.limit_concurrency
            if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
                return None  # uvicorn's 503
            route = now_routes.get(self.url.decode("latin-1"))  # an exact path, without query or escapes
            if route is None:
                return None
            length = None
            for name, value in self.headers:
                if name == b"content-length":
                    if length is not None or not value.isdigit():
                        return None
                    length = int(value)
                elif name == b"transfer-encoding":
                    return None
            return route if length is not None and length <= answer_now_bytes else None

        def on_body(self, body: bytes) -> None:
            if self._now is not None:
                self._now[3].extend(body)
            else:
                super().on_body(body)

        def on_message_complete(self) -> None:
            now = self._now
            if now is None:
                super().on_message_complete()
                self._disarm()
                return
            self._now = None
            self._disarm()
            route, default_headers, start, body = now
            payload, status = route.respond_now(bytes(body), start)
            # What uvicorn writes for the ASGI app's response (RequestResponseCycle.send): the status line, its
            # default headers (date), the route's own, "connection: close" when the client asked for it.
            keep_alive = self.parser.should_keep_alive() and not self._now_close
            head = [STATUS_LINE[status]]
            for name, value in default_headers:
                head += [name.lower(), b": ", value, b"\r\n"]
            head += [b"content-length: ", str(len(payload)).encode(), b"\r\ncontent-type: ", JSON_BYTES, b"\r\n",
                     b"\r\n" if keep_alive else b"connection: close\r\n\r\n", payload]
            self.transport.write(b"".join(head))
            if not keep_alive:
                self.transport.close()
            self.on_response_complete()

        def shutdown(self) -> None:
            if self._now is not None:  # a request answer_now serves is answered first, as uvicorn's are
                self._now_close = True
                return
            super().shutdown()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._now = None
            super().connection_lost(exc)

    return TimedHttpToolsProtocol


def answer_now_routes(app: Any) -> dict[str, Any]:
    """The routes of ``app`` (app.HotRoutes, or anything else: none) that answer a small body at once: the verbs
    whose work is synchronous (filter, prioritize and their per-agent routes; not bind, which awaits the API)."""
    from extender.app import HotRoutes, VerbRoute

    if not isinstance(app, HotRoutes):
        return {}
    return {path: route for path, route in app.routes.items() if isinstance(route, VerbRoute) and route.work is not None}


def server_configs(config: Config, app: Any, admin_app: Any, level: int) -> tuple[Any, Any]:
    """uvicorn configs of the scheduler-facing server (TLS when configured) and the admin server
    (None when KSO_ADMIN_PORT is 0)."""
    import ssl

    import uvicorn

    s = config.settings
    # log_config None: uvicorn's records go to kso's handler (kso.core.logs), in kso's format.
    common = {"log_level": uvicorn_level(level), "log_config": None, "access_log": False, "loop": "uvloop",
              "limit_concurrency": s.max_connections,
              "timeout_keep_alive": 5, "server_header": False,
              # No X-Forwarded-For rewriting: the scheduler calls kso directly, and the per-request header
              # scan costs time on every call (the debug routes' client check sees the real peer).
              "proxy_headers": False}
    tls: dict[str, Any] = {}
    if s.tls_cert_file:
        tls = {"ssl_certfile": s.tls_cert_file, "ssl_keyfile": s.tls_key_file or None}
        if s.tls_client_ca_file:
            tls |= {"ssl_ca_certs": s.tls_client_ca_file, "ssl_cert_reqs": ssl.CERT_REQUIRED}
    # filter and prioritize answered by the protocol itself (timed_protocol's answer_now) when the body is small
    answer_now = answer_now_routes(app)
    main = uvicorn.Config(app, host=s.host, port=s.http_port, **common, **tls,
                          http=timed_protocol(s.header_timeout_s, s.body_timeout_s, answer_now,
                                              min(s.offload_body_bytes, s.max_body_bytes)))
    admin = None if admin_app is None else uvicorn.Config(admin_app, host=s.admin_host, port=s.admin_port, **common,
                                                          http=timed_protocol(s.header_timeout_s, s.body_timeout_s))
    return main, admin


async def serve_until_stopped(main_config: Any, admin_config: Any, main_socket: socket.socket | None = None,
                              admin_socket: socket.socket | None = None) -> None:
    """Run the scheduler-facing and admin servers on one event loop (so /healthz answers only when the
    loop that serves the scheduler does); SIGTERM / SIGINT stop both. The sockets, when given, are already
    listening (``listen_sockets``); else uvicorn binds its config's host and port."""
    import uvicorn

    class AdminServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # the main server owns the signals
            yield

    admin = None if admin_config is None else AdminServer(admin_config)

    class MainServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if admin is not None:
                admin.should_exit = True

    main = MainServer(main_config)
    main_sockets = None if main_socket is None else [main_socket]
    if admin is None:
        await main.serve(main_sockets)
        return
    admin_task = asyncio.ensure_future(admin.serve(None if admin_socket is None else [admin_socket]))
    await main.serve(main_sockets)
    admin.should_exit = True
    await admin_task


def listen_sockets(config: Config) -> tuple[socket.socket, socket.socket | None]:
    """The scheduler-facing and admin sockets, bound and listening before anything else starts: a port that is
    taken (or the two ports being one) is one line naming the setting (SystemExit), not uvicorn's error after
    the cache, the plan jobs and the other server have started."""
    s = config.settings
    ports = [(s.host, s.http_port, "--port, HTTP_PORT")]
    if s.admin_port:
        if s.admin_port == s.http_port and s.admin_host == s.host:
            raise SystemExit(f"kso: the admin port {s.admin_port} (--admin-port, KSO_ADMIN_PORT) is also the "
                             "scheduler-facing port (--port, HTTP_PORT): give it another port, or 0 to serve "
                             "/metrics, /healthz and /readyz on the main port")
        ports.append((s.admin_host, s.admin_port, "--admin-port, KSO_ADMIN_PORT"))
    sockets: list[socket.socket] = []
    for host, port, name in ports:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sockets.append(socket.create_server((host, port), family=family, backlog=2048))
        except OSError as exc:
            for sock in sockets:
                sock.close()
            why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise SystemExit(f"kso: cannot listen on {host}:{port} ({name}): {why}") from None
    return sockets[0], sockets[1] if len(sockets) > 1 else None


def serve(config: Config) -> None:
    import uvloop

    from extender.app import create_admin_app, create_app, outermost_hot_routes

    level = config.logs.level_number
    configure_logging(level, config.logs.format)
    s = config.settings
    if bool(s.tls_cert_file) != bool(s.tls_key_file) or (s.tls_client_ca_file and not s.tls_cert_file):
        raise SystemExit("kso: TLS needs both KSO_TLS_CERT_FILE and KSO_TLS_KEY_FILE (and KSO_TLS_CLIENT_CA_FILE needs them)")
    main_socket, admin_socket = listen_sockets(config)
    try:
        running = build(config)
    except BaseException:
        main_socket.close()
        if admin_socket is not None:
            admin_socket.close()
        raise
    # Signals recorded, not acted on, until the servers have stopped and running.close() has run: uvicorn
    # re-raises the signal it caught once it is done, which with the default handler would kill the
    # process before the solver child was stopped (it then outlived the server, and with it the
    # multiprocessing resource tracker).
    stopped_by: list[int] = []
    previous = {sig: signal.signal(sig, lambda n, _f: stopped_by.append(n)) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        jobs = start_plan_jobs(running.extender, running.api_client)
        if jobs is not None:
            running.stop.append(jobs.close)
        app = create_app(running.extender, admin_routes=s.admin_port == 0)
        admin_app = create_admin_app(running.extender) if s.admin_port else None
        main_config, admin_config = server_configs(config, outermost_hot_routes(app), admin_app, level)
        # The node cache is long-lived: move it out of the collector's reach and collect young objects
        # less often. Parsing one full-nodes body creates ~160k containers; with default thresholds that
        # triggers repeated full collections over the cache, several times the parse itself.
        gc.collect()
        gc.freeze()
        gc.set_threshold(100_000, 50, 100)
        # A worker thread answering a big body hands the interpreter back to the event loop every 1 ms
        # instead of 5, which shortens /healthz's tail under the worst allowed requests
        # (benchmarks/adversarial.py measures it).
        sys.setswitchinterval(0.001)
        scheme = "https" if s.tls_cert_file else "http"
        log.info("serving kube-scheduler on %s://%s:%d%s", scheme, s.host, s.http_port,
                 f"; /metrics, /healthz, /readyz on http://{s.admin_host}:{s.admin_port}" if admin_socket else "")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve_until_stopped(main_config, admin_config, main_socket, admin_socket))
    finally:
        running.close()
        main_socket.close()
        if admin_socket is not None:
            admin_socket.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopped_by:
        log.info("stopped by %s", signal.Signals(stopped_by[0]).name)
