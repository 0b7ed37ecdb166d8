"""HTTP routes: the kube-scheduler extender protocol, kube-safe-scheduler's and the image-score
example's routes, /debug/explain, and the admin routes /metrics, /healthz, /readyz (on their own port
in a server, see server.py).

Handlers read the raw body and answer bytes: FastAPI's request models and response validation are
bypassed on the hot path on purpose (a pydantic model of a whole Pod costs more than the decision).
The POST routes of the scheduler verbs are also served by a pure-ASGI front (``HotRoutes``) that finds
them by exact path and answers without FastAPI's router, dependency solving and per-request exit stack
(~0.1 ms per call); anything else, and any request with a root path, goes through FastAPI as before,
to the same handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from extender.protocol import (
    Limits,
    ProtocolError,
    dumps,
    parse_binding_args,
    parse_extender_args,
    parse_preemption_args,
)
from extender.service import Extender
from forecasting.quality import REGISTRY as FORECAST_INPUT_REGISTRY

log = logging.getLogger("kso.extender.http")

VERSION = "0.1.0"
JSON = "application/json"
JSON_BYTES = JSON.encode()
# Requests whose body is past KSO_OFFLOAD_BODY_BYTES run on worker threads, this many at a time (the
# others wait, their bodies already read): two keep both cores busy and bound the memory big calls take.
OFFLOADED_AT_ONCE = 2
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def too_deep(limits: Limits) -> ProtocolError:
    """The reply encoder's nesting limit (254) reached, or Python's recursion limit: the body was nested
    deeper than check_depth could see (brackets hidden in strings). The same 400 as check_depth's."""
    return ProtocolError(f"JSON nested more than the {limits.max_depth} levels allowed (KSO_MAX_JSON_DEPTH)",
                         "too_deep")


class BodyTooLarge(ProtocolError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body larger than {limit} bytes (KSO_MAX_BODY_BYTES)", "body_too_large")


async def read_body(request: Request, limit: int) -> bytes:
    # The request's body has not been read by anyone else on these routes, so the ASGI reader serves both.
    return await read_body_asgi(request.scope, request.receive, limit)


async def read_body_asgi(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The body of a bare ASGI request, at most ``limit`` bytes (Content-Length checked first, then the
    bytes received), as Starlette's Request.stream reads it; a disconnect raises ClientDisconnect."""
    declared = None
    for key, value in scope["headers"]:
        if key == b"content-length":
            declared = value.decode("latin-1")
            break
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise ProtocolError("invalid Content-Length header", "bad_request") from None
        if size > limit:
            raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(limit)
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect()


def _json(obj: Any, status: int = 200) -> Response:
    return Response(dumps(obj), status_code=status, media_type=JSON)


RawEndpoint = Callable[[Scope, Receive, Send], Awaitable[None]]


class HotRoutes:
    """ASGI middleware: POSTs to the scheduler verbs' exact paths go straight to their handler; everything
    else to the app. Headers and body are those Starlette's Response sends (content-length, content-type)."""

    def __init__(self, app: ASGIApp, routes: dict[str, RawEndpoint]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            endpoint = self.routes.get(scope["path"])
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BindQueue:
    """The binds in flight (at most ``slots``: KSO_BIND_THREADS) and those waiting for a slot, in arrival order, on
    the event loop. A bind still waiting ``max_wait_s`` after it arrived leaves the queue unposted (``enter``
    returns "expired"), at that moment rather than when a slot frees: kube-scheduler has stopped waiting at its
    httpTimeout, and a Binding posted after that only races its own binder. A bind that would not get a slot in
    time, by the binds ahead of it and the recent binds' duration (``took``, a moving average), is refused at
    once ("full"), as is one beyond ``max_waiting``: kube-scheduler then binds it itself at once instead of
    after the wait, and a stalled API server cannot fill the connection cap that filter and prioritize share (a
    503 there makes kube-scheduler place pods without kso)."""

    def __init__(self, slots: int, max_wait_s: float, max_waiting: int) -> None:
        self.free = slots
        self.max_wait_s = max_wait_s
        self.max_waiting = max_waiting
        self.waiting: deque[asyncio.Future[bool]] = deque()
        self.slots = slots
        self.took = 0.0  # seconds a posted bind held its slot, moving average (0 until one has been posted)

    async def enter(self, arrived: float) -> str:
        """"ok" (a slot is held: call ``leave`` after the bind), "expired" or "full". ``arrived``: the
        request's time.perf_counter() on arrival."""
        if self.free > 0 and not self.waiting:
            self.free -= 1
            return "ok"
        left = self.max_wait_s - (time.perf_counter() - arrived)
        if left <= 0:
            return "expired"
        if len(self.waiting) >= self.max_waiting or (len(self.waiting) // self.slots + 1) * self.took > left:
            return "full"
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[bool] = loop.create_future()
        self.waiting.append(granted)
        timer = loop.call_later(left, self._expire, granted)
        try:
            return "ok" if await granted else "expired"
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled() and granted.result():
                self.leave()  # granted just as the request was cancelled: hand the slot on
            elif granted in self.waiting:
                self.waiting.remove(granted)
            raise
        finally:
            timer.cancel()

    def _expire(self, granted: asyncio.Future[bool]) -> None:
        if not granted.done():
            self.waiting.remove(granted)
            granted.set_result(False)

    def leave(self, took: float | None = None) -> None:
        """Give the slot to the longest-waiting bind, or back; ``took``: seconds the bind held it."""
        if took is not None:
            self.took = took if self.took == 0.0 else 0.9 * self.took + 0.1 * took
        while self.waiting:
            granted = self.waiting.popleft()
            if not granted.done():
                granted.set_result(True)
                return
        self.free += 1


class RateLimitedLog:
    """A warning at most every ``every_s`` seconds, saying how many were held back since the last."""

    def __init__(self, logger: logging.Logger, every_s: float = 10.0) -> None:
        self.logger, self.every_s = logger, every_s
        self.last = -float("inf")
        self.held = 0

    def warning(self, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            self.held += 1
            return
        held, self.held, self.last = self.held, 0, now
        self.logger.warning(msg + (f" ({held} more like it in the last {self.every_s:.0f} s not logged)" if held else ""),
                            *args)


class VerbHandlers:
    """The scheduler verbs of one extender as HTTP handlers: each reads its body within the bound, answers
    bytes, and never answers a 500 (a bad input is a 400 naming the bound, an unexpected failure the verb's
    safe answer). ``handler`` wraps one verb's work; the rest are the verbs' body parsers and fallbacks."""

    def __init__(self, extender: Extender) -> None:
        self.extender = extender
        self.metrics = extender.metrics
        self.limits = extender.limits
        self.max_body = extender.settings.max_body_bytes
        self.offload_over = extender.settings.offload_body_bytes
        self.offloaded = asyncio.Semaphore(OFFLOADED_AT_ONCE)
        # The bind verb's binds in flight on the event loop (an AsyncBinder: API mode), KSO_BIND_THREADS at once.
        # Half the connection cap may wait for a slot; the other half stays for filter and prioritize.
        s = extender.settings
        self.bind_queue = BindQueue(s.bind_threads, s.bind_max_wait_s, max(1, s.max_connections // 2))
        self.bind_refusals = RateLimitedLog(log)

    def answer(self, verb: str, work: Callable[[bytes], Any], fallback: Callable[[bytes], Any] | None,
               body: bytes) -> tuple[bytes, int]:
        """Run one call on its body: the reply bytes and status. A bound or bad input is a 400 with a
        message; any unexpected failure the verb's safe answer (never a 500)."""
        try:
            result = work(body)
            return (result if isinstance(result, bytes) else dumps(result)), 200  # bytes: encoded already
        except Exception as exc:  # noqa: BLE001 - fail open, loudly, instead of a 500
            return self.failed(verb, exc, fallback, body)

    async def answer_async(self, verb: str, work: Callable[[bytes], Awaitable[Any]], body: bytes) -> tuple[bytes, int]:
        """``answer`` for work done on the event loop (bind through an AsyncBinder; no fallback)."""
        try:
            return dumps(await work(body)), 200
        except Exception as exc:  # noqa: BLE001 - fail open, loudly, instead of a 500
            return self.failed(verb, exc, None, body)

    def failed(self, verb: str, exc: Exception, fallback: Callable[[bytes], Any] | None, body: bytes) -> tuple[bytes, int]:
        """The answer to a call whose work raised: a bound or bad input is a 400, anything else the safe answer."""
        if isinstance(exc, RecursionError) or (isinstance(exc, orjson.JSONEncodeError) and "Recursion" in str(exc)):
            return self.bad_request(verb, too_deep(self.limits))
        if isinstance(exc, ProtocolError):
            return self.bad_request(verb, exc)
        return self.internal(verb, exc, fallback, body)

    def bad_request(self, verb: str, exc: ProtocolError) -> tuple[bytes, int]:
        self.metrics.errors.labels(verb, exc.kind).inc()
        log.warning("%s: 400 %s: %s", verb, exc.kind, exc)
        return dumps({"Error": f"{verb}: {exc}"}), 400

    def internal(self, verb: str, exc: Exception, fallback: Callable[[bytes], Any] | None, body: bytes) -> tuple[bytes, int]:
        self.metrics.errors.labels(verb, "internal").inc()
        log.error("%s: internal error; answering with the safe fallback", verb, exc_info=exc)
        if fallback is not None:
            try:
                return dumps(fallback(body)), 200
            except Exception:  # noqa: BLE001
                log.exception("%s: fallback failed too", verb)
        return dumps({"Error": f"{verb}: internal error in kso: {type(exc).__name__}: {exc}"}), 200

    def handler(self, verb: str, work: Callable[[bytes], Any], fallback: Callable[[bytes], Any] | None = None,
                then: Callable[[Any], Awaitable[Any]] | None = None,
                ) -> tuple[Callable[[Request], Awaitable[Response]], RawEndpoint]:
        """Wrap one verb: read the body within the limit, time it, answer on the event loop when the body
        is small and on a worker thread when it is big. With ``then`` (bind through an AsyncBinder), ``work``
        parses the body and the answer is ``then``'s of what it parsed, awaited on the event loop in a bind slot
        (``run_bind``). Returns the FastAPI endpoint and the same handler as a bare ASGI endpoint (for HotRoutes)."""
        latency = self.metrics.latency.labels(verb)
        limit, offload_over, offloaded, answer = self.max_body, self.offload_over, self.offloaded, self.answer

        async def respond(read: Callable[[], Awaitable[bytes]]) -> tuple[bytes, int]:
            start = time.perf_counter()
            try:
                body = await read()
                if then is not None:
                    return await self.run_bind(start, body, work, then)
                if len(body) > offload_over:
                    async with offloaded:
                        return await run_in_threadpool(answer, verb, work, fallback, body)
                return answer(verb, work, fallback, body)
            except ProtocolError as exc:  # the body's size or framing
                return self.bad_request(verb, exc)
            except Exception as exc:  # noqa: BLE001 - a client gone mid-body: the same safe answer as ever
                return self.internal(verb, exc, fallback, b"")
            finally:
                latency.observe(time.perf_counter() - start)

        async def endpoint(request: Request) -> Response:
            payload, status = await respond(lambda: read_body(request, limit))
            return Response(payload, status_code=status, media_type=JSON)

        async def raw(scope: Scope, receive: Receive, send: Send) -> None:
            payload, status = await respond(lambda: read_body_asgi(scope, receive, limit))
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-length", str(len(payload)).encode()), (b"content-type", JSON_BYTES)]})
            await send({"type": "http.response.body", "body": payload})

        return endpoint, raw

    async def run_bind(self, arrived: float, body: bytes, parse: Callable[[bytes], Any],
                       bind: Callable[[Any], Awaitable[Any]]) -> tuple[bytes, int]:
        """``bind`` of what ``parse`` makes of the body (a big body parsed on a worker thread), on the event loop,
        once the bind queue gives it a slot; a bind that waited past KSO_BIND_MAX_WAIT_S, or found the queue
        full, is answered with an error instead and never posted."""
        outcome = await self.bind_queue.enter(arrived)
        if outcome == "ok":
            began = time.perf_counter()

            async def work(b: bytes) -> Any:
                return await bind(parse(b) if len(b) <= self.offload_over else await run_in_threadpool(parse, b))

            try:
                return await self.answer_async("bind", work, body)
            finally:
                self.bind_queue.leave(time.perf_counter() - began)
        self.metrics.bindings.labels(outcome).inc()
        try:
            args = parse_binding_args(body, self.limits)
        except ProtocolError:
            what = "pod"
        else:
            what = f"pod {args.pod_namespace}/{args.pod_name} to {args.node}"
            self.extender.bind_not_posted(args)
        q = self.bind_queue
        if outcome == "expired":
            why = (f"not bound by kso: waited {time.perf_counter() - arrived:.2f} s for a bind slot, past "
                   f"KSO_BIND_MAX_WAIT_S ({q.max_wait_s:g} s; kube-scheduler's httpTimeout is near)")
        else:
            why = (f"not bound by kso: {len(q.waiting)} binds already wait for a bind slot (binds take "
                   f"{1000 * q.took:.0f} ms; at most {q.max_waiting} wait, for at most KSO_BIND_MAX_WAIT_S {q.max_wait_s:g} s)")
        self.bind_refusals.warning("bind %s %s (KSO_BIND_THREADS: %d binds in flight)", what, why, q.slots)
        return dumps({"Error": f"binding {what}: {why}"}), 200

    # ---- bodies and the verbs' safe answers (when the work itself failed) ----
    def extender_args(self, body: bytes) -> Any:
        return parse_extender_args(body, self.limits)

    def filter_all_pass(self, body: bytes) -> dict[str, Any]:
        args = self.extender_args(body)
        if args.nodes is not None:
            return {"Nodes": args.node_list, "NodeNames": None, "FailedNodes": {},
                    "FailedAndUnresolvableNodes": {}, "Error": ""}
        return {"NodeNames": args.node_names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}

    def prioritize_neutral(self, body: bytes) -> list[dict[str, Any]]:
        args = self.extender_args(body)
        names = args.node_names if args.nodes is None else [
            (n.get("metadata") or {}).get("name", "") for n in args.nodes]
        return [{"Host": n, "Score": 0} for n in names or []]

    def preempt_echo(self, body: bytes) -> dict[str, Any]:
        args = parse_preemption_args(body, self.limits)
        return {"NodeNameToMetaVictims": {n: {"Pods": [{"UID": u} for u in v.uids],
                                              "NumPDBViolations": v.pdb_violations}
                                          for n, v in args.candidates.items()}}


def add_verb_routes(app: FastAPI, verbs: VerbHandlers) -> dict[str, RawEndpoint]:
    """The route table of the scheduler verbs (as FastAPI routes); returns the same handlers by exact path,
    for HotRoutes."""
    extender = verbs.extender
    s = extender.settings
    args = verbs.extender_args
    hot: dict[str, RawEndpoint] = {}

    def route(path: str, endpoints: tuple[Callable[[Request], Awaitable[Response]], RawEndpoint]) -> None:
        app.add_api_route(path, endpoints[0], methods=["POST"], include_in_schema=False)
        hot.setdefault(path, endpoints[1])  # the first route registered for a path wins, as in FastAPI

    limits = verbs.limits
    filter_ep = verbs.handler("filter", lambda b: extender.filter(args(b)), verbs.filter_all_pass)
    prioritize_ep = verbs.handler("prioritize", lambda b: extender.prioritize_json(args(b)), verbs.prioritize_neutral)
    if extender.binds_on_loop:  # API mode: on the event loop, in the bind queue's slots
        bind_ep = verbs.handler("bind", lambda b: parse_binding_args(b, limits), then=extender.bind_async)
    else:  # offline: RecordingBinder records at once
        bind_ep = verbs.handler("bind", lambda b: extender.bind(parse_binding_args(b, limits)))
    preempt_ep = verbs.handler("preempt", lambda b: extender.preempt(parse_preemption_args(b, limits)), verbs.preempt_echo)

    prefix = "/" + s.url_prefix.strip("/") if s.url_prefix.strip("/") else ""
    for verb, ep in (("filter", filter_ep), ("prioritize", prioritize_ep), ("bind", bind_ep), ("preempt", preempt_ep)):
        route(f"{prefix}/{verb}", ep)
    route("/scheduler/bind", bind_ep)

    # kube-safe-scheduler's per-agent routes, one per predicate and priority of the enabled agents.
    image_params = extender.config.agent_params.get("image")
    for name in extender.predicates:
        ep = verbs.handler("filter", lambda b, n=name: extender.filter(args(b), [n]), verbs.filter_all_pass)
        route(f"/scheduler/predicates/{name}", ep)
    for name in extender.priorities:
        ep = verbs.handler("prioritize", lambda b, n=name: extender.priority(n, args(b)), verbs.prioritize_neutral)
        route(f"/scheduler/priorities/{name}", ep)
        if name == "image_score" and image_params is not None:
            # The image-score example's route: <api-prefix>/<priorities-prefix>/image_score.
            path = "/" + "/".join(p.strip("/") for p in (image_params.api_prefix, image_params.priorities_prefix,
                                                         "image_score") if p.strip("/"))
            route(path, ep)
    return hot


def create_app(extender: Extender, admin_routes: bool = True) -> FastAPI:
    """The scheduler-facing app; with ``admin_routes`` it serves /metrics, /healthz and /readyz as well
    (tests, demos, or a server without an admin port)."""
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await extender.aclose()  # the binder's session, on the loop that served it, once requests have drained

    # redirect_slashes off: "/filter/" is a 404, never a 307 whose Location comes from the Host header.
    app = FastAPI(title="kube-safe-optimizer extender", version=VERSION, docs_url=None, redoc_url=None,
                  openapi_url=None, redirect_slashes=False, lifespan=lifespan)
    app.state.extender = extender
    verbs = VerbHandlers(extender)
    hot = add_verb_routes(app, verbs)

    @app.get("/version")
    async def version() -> Response:
        return Response(VERSION, media_type="text/plain")

    if admin_routes:
        add_admin_routes(app, extender)
    add_debug_routes(app, extender, verbs.answer)
    app.add_middleware(HotRoutes, routes=hot)
    app.state.bind_queue = verbs.bind_queue
    app.state.hot_routes = hot  # serve() puts them in front of the whole app too (see outermost_hot_routes)
    return app


def outermost_hot_routes(app: FastAPI) -> HotRoutes:
    """The scheduler verbs ahead of FastAPI's whole middleware stack (ServerErrorMiddleware, the
    middleware build on each call): ~14% less server time per filter, 3% per prioritize (in-process, loaded
    2-core machine). Their handlers catch every error themselves, so they never needed the stack; the
    HotRoutes inside create_app stays for callers (tests, the demo) that serve the FastAPI app directly."""
    return HotRoutes(app, app.state.hot_routes)


def debug_allowed(setting: str, client_host: str | None) -> bool:
    """KSO_DEBUG_ROUTES: ON answers anyone, LOOPBACK only clients on this host, OFF nobody."""
    return setting == "ON" or (setting == "LOOPBACK" and client_host in LOOPBACK_HOSTS)


def add_debug_routes(app: FastAPI, extender: Extender,
                     answer: Callable[[str, Callable[[bytes], Any], Any, bytes], tuple[bytes, int]]) -> None:
    """/debug/explain (GET by pod, POST with an ExtenderArgs body), on a worker thread: it walks every
    node of the call in Python. Off or loopback-only unless KSO_DEBUG_ROUTES=ON."""
    s = extender.settings
    limits = extender.limits

    def refused(request: Request) -> Response | None:
        if debug_allowed(s.debug_routes, request.client.host if request.client else None):
            return None
        return _json({"Error": f"/debug routes are {'off' if s.debug_routes == 'OFF' else 'for loopback clients only'}"
                               " (KSO_DEBUG_ROUTES)"}, 404)

    def explain_pod(ref: str, uid: str, nodes: str) -> tuple[bytes, int]:
        ns, _, name = ref.rpartition("/")
        pod = extender.state.pending_pod(uid, ns or "default", name)
        if pod is None:
            return dumps({"Error": f"pod {ref or uid!r} unknown: kso knows pods it was asked about "
                                   "or that its cache lists; give ?pod=namespace/name or POST an ExtenderArgs body"}), 404
        names = [n for n in nodes.split(",") if n] or extender.state.node_names()
        if len(names) > limits.max_nodes:
            return dumps({"Error": f"explain: {len(names)} nodes, more than the {limits.max_nodes} allowed per request "
                                   "(KSO_MAX_NODES); name fewer with ?nodes=a,b"}), 400
        return dumps(extender.explain(pod, extender.state.view(names))), 200

    @app.get("/debug/explain")
    async def explain_get(request: Request) -> Response:
        if (no := refused(request)) is not None:
            return no
        q = request.query_params
        payload, status = await run_in_threadpool(explain_pod, q.get("pod", ""), q.get("uid", ""), q.get("nodes", ""))
        return Response(payload, status_code=status, media_type=JSON)

    def explain_body(body: bytes) -> dict[str, Any]:
        args = parse_extender_args(body, limits)
        return extender.explain(extender.parse_pod(args.pod), extender.resolve(args))

    async def explain_post(request: Request) -> Response:
        if (no := refused(request)) is not None:
            return no
        try:
            body = await read_body(request, s.max_body_bytes)
        except ProtocolError as exc:
            return _json({"Error": f"explain: {exc}"}, 400)
        payload, status = await run_in_threadpool(answer, "explain", explain_body, None, body)
        return Response(payload, status_code=status, media_type=JSON)

    app.add_api_route("/debug/explain", explain_post, methods=["POST"], include_in_schema=False)


def readiness(extender: Extender) -> tuple[dict[str, Any], int]:
    """/readyz: ready once the node cache has synced; the forecast source's health as detail (forecasts
    failing do not make kso unready: the safe agent falls back to node annotations)."""
    st = extender.state
    body: dict[str, Any] = {"ready": st.synced, "source": st.source, "nodes": len(st)}
    if not st.synced:
        body["reason"] = "node cache has not synced yet"
    fs = extender.forecast_status
    if fs is not None:
        age = None if fs.last_success is None else round(time.time() - fs.last_success, 3)
        body["forecasts"] = {"source": fs.source, "last_success_age_s": age, "consecutive_failures": fs.consecutive_failures,
                             "last_error": fs.last_error, "healthy": fs.last_success is not None and fs.consecutive_failures == 0}
    return body, 200 if st.synced else 503


def add_admin_routes(app: FastAPI, extender: Extender) -> None:
    metrics = extender.metrics

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response("ok", media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> Response:
        body, status = readiness(extender)
        return _json(body, status)

    @app.get("/metrics")
    async def prom_metrics() -> Response:
        # The forecasting layer counts its input decisions (spikes removed, units fixed, ...) in its own
        # registry, since it cannot import the extender's; both are served here.
        body = generate_latest(metrics.registry) + generate_latest(FORECAST_INPUT_REGISTRY)
        return Response(body, media_type=CONTENT_TYPE_LATEST)


def create_admin_app(extender: Extender) -> FastAPI:
    """The admin port's app: /metrics, /healthz, /readyz, /version, nothing else."""
    app = FastAPI(title="kube-safe-optimizer admin", version=VERSION, docs_url=None, redoc_url=None, openapi_url=None,
                  redirect_slashes=False)

    @app.get("/version")
    async def version() -> Response:
        return Response(VERSION, media_type="text/plain")

    add_admin_routes(app, extender)
    return app
