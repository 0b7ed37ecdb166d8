"""HTTP routes: the kube-scheduler extender protocol, kube-safe-scheduler's and the image-score
example's routes, /debug/explain, and the admin routes /metrics, /healthz, /readyz (on their own port
in a server, see server.py).

Handlers read the raw body and answer bytes: FastAPI's request models and response validation are
bypassed on the hot path on purpose (a pydantic model of a whole Pod costs more than the decision).
The POST routes of the scheduler verbs (``VerbRoute``) are also served by a pure-ASGI front (``HotRoutes``)
that finds them by exact path and answers without FastAPI's router, dependency solving and per-request exit
stack; anything else, and any request with a root path, goes through FastAPI, to the same handlers. Every
route is a named function or a VerbRoute; what a route needs (the extender, its verb handlers) is on
``app.state``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from decisions.engine import InputError
from extender.bind_queue import BindQueue, RateLimitedLog
from extender.protocol import (
    Limits,
    ProtocolError,
    dumps,
    parse_binding_args,
    parse_extender_args,
    parse_preemption_args,
)
from extender.verbs import Extender
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


class VerbHandlers:
    """The scheduler verbs of one extender as HTTP work: each verb's work on a body (``*_body``), its safe
    answer when that work fails (``filter_all_pass``, ``prioritize_neutral``, ``preempt_echo``), and ``answer``,
    which runs one and never answers a 500 (a bad input is a 400 naming the bound, an unexpected failure the
    verb's safe answer)."""

    def __init__(self, extender: Extender) -> None:
        self.extender = extender
        self.metrics = extender.metrics
        self.limits = extender.limits
        self.max_body = extender.settings.max_body_bytes
        self.offload_over = extender.settings.offload_body_bytes
        self.offloaded = asyncio.Semaphore(OFFLOADED_AT_ONCE)
        # The bind verb's binds in flight on the event loop, KSO_BIND_THREADS at once. Half the connection cap may
        # wait for a slot; the other half stays for filter and prioritize.
        s = extender.settings
        self.bind_queue = BindQueue(s.bind_threads, s.bind_max_wait_s, max(1, s.max_connections // 2))
        self.http_timeout_s = s.http_timeout_s  # kube-scheduler's wait for an answer
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

    def failed(self, verb: str, exc: Exception, fallback: Callable[[bytes], Any] | None, body: bytes) -> tuple[bytes, int]:
        """The answer to a call whose work raised: a bound or bad input is a 400, anything else the safe answer."""
        if isinstance(exc, RecursionError) or (isinstance(exc, orjson.JSONEncodeError) and "Recursion" in str(exc)):
            return self.bad_request(verb, too_deep(self.limits))
        if isinstance(exc, InputError):
            return self.bad_request(verb, exc)
        return self.internal(verb, exc, fallback, body)

    def bad_request(self, verb: str, exc: InputError) -> tuple[bytes, int]:
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

    async def run_bind(self, arrived: float, body: bytes) -> tuple[bytes, int]:
        """The bind of the body's BindingArgs (a big body parsed on a worker thread), on the event loop, once the
        bind queue gives it a slot; a bind that waited past KSO_BIND_MAX_WAIT_S, or found the queue full, is
        answered with an error instead and never posted. ``arrived``: the request's time.perf_counter() on arrival;
        the binder's requests end by KSO_HTTP_TIMEOUT_S after it, when kube-scheduler stops waiting."""
        outcome = await self.bind_queue.enter(arrived)
        if outcome == "ok":
            began = time.perf_counter()
            deadline = time.monotonic() + self.http_timeout_s - (began - arrived)
            try:
                return dumps(await self.bind_body(body, deadline)), 200
            except Exception as exc:  # noqa: BLE001 - fail open, loudly, instead of a 500
                return self.failed("bind", exc, None, body)
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

    # ---- each verb's work on a body ----
    def extender_args(self, body: bytes) -> Any:
        return parse_extender_args(body, self.limits)

    def filter_body(self, body: bytes) -> dict[str, Any]:
        return self.extender.filter(self.extender_args(body))

    def prioritize_body(self, body: bytes) -> bytes:
        return self.extender.prioritize_json(self.extender_args(body))

    def predicate_body(self, name: str, body: bytes) -> dict[str, Any]:
        """kube-safe-scheduler's /scheduler/predicates/<name>: filter by that one predicate."""
        return self.extender.filter(self.extender_args(body), [name])

    def priority_body(self, name: str, body: bytes) -> list[dict[str, Any]]:
        """kube-safe-scheduler's /scheduler/priorities/<name>: that one priority, raw."""
        return self.extender.priority(name, self.extender_args(body))

    async def bind_body(self, body: bytes, deadline: float) -> dict[str, Any]:
        """The bind awaited on the event loop, its API calls ending by ``deadline`` (time.monotonic()); a big
        body parsed on a worker thread."""
        if len(body) <= self.offload_over:
            args = parse_binding_args(body, self.limits)
        else:
            args = await run_in_threadpool(parse_binding_args, body, self.limits)
        return await self.extender.bind_async(args, deadline)

    def preempt_body(self, body: bytes) -> dict[str, Any]:
        return self.extender.preempt(parse_preemption_args(body, self.limits))

    def explain_body(self, body: bytes) -> dict[str, Any]:
        """/debug/explain's POST: explain an ExtenderArgs body's call."""
        call = self.extender.call_of(self.extender_args(body))
        return self.extender.explain(call.pod, call.view)

    # ---- the verbs' safe answers (when the work itself failed) ----
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


class VerbRoute:
    """One verb's route: read the body within the limit, time it, answer on the event loop when the body is small
    and on a worker thread when it is big. ``endpoint`` serves it through FastAPI; the object itself is the same
    handler as a bare ASGI endpoint (for HotRoutes)."""

    def __init__(self, verbs: VerbHandlers, verb: str, work: Callable[[bytes], Any] | None,
                 fallback: Callable[[bytes], Any] | None = None) -> None:
        self.verbs, self.verb, self.work, self.fallback = verbs, verb, work, fallback
        self.latency = verbs.metrics.latency.labels(verb)

    async def answer_body(self, arrived: float, body: bytes) -> tuple[bytes, int]:
        verbs, work = self.verbs, self.work
        assert work is not None  # only BindRoute has none, and answers otherwise
        if len(body) > verbs.offload_over:
            async with verbs.offloaded:
                return await run_in_threadpool(verbs.answer, self.verb, work, self.fallback, body)
        return verbs.answer(self.verb, work, self.fallback, body)

    async def respond(self, scope: Scope, receive: Receive) -> tuple[bytes, int]:
        verbs = self.verbs
        start = time.perf_counter()
        try:
            return await self.answer_body(start, await read_body_asgi(scope, receive, verbs.max_body))
        except ProtocolError as exc:  # the body's size or framing
            return verbs.bad_request(self.verb, exc)
        except Exception as exc:  # noqa: BLE001 - a client gone mid-body: the same safe answer as ever
            return verbs.internal(self.verb, exc, self.fallback, b"")
        finally:
            self.latency.observe(time.perf_counter() - start)

    def respond_now(self, body: bytes, start: float) -> tuple[bytes, int]:
        """``respond``'s answer to a body already read, no bigger than KSO_OFFLOAD_BODY_BYTES and KSO_MAX_BODY_BYTES
        (so answered on the event loop), timed from ``start`` (time.perf_counter()): server.timed_protocol's
        answer_now. Only for a route with synchronous work (not bind)."""
        verbs, work = self.verbs, self.work
        assert work is not None
        try:
            return verbs.answer(self.verb, work, self.fallback, body)
        finally:
            self.latency.observe(time.perf_counter() - start)

    async def endpoint(self, request: Request) -> Response:
        payload, status = await self.respond(request.scope, request.receive)
        return Response(payload, status_code=status, media_type=JSON)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        payload, status = await self.respond(scope, receive)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(payload)).encode()), (b"content-type", JSON_BYTES)]})
        await send({"type": "http.response.body", "body": payload})


class BindRoute(VerbRoute):
    """The bind verb's route: the bind runs on the event loop, in a bind slot (VerbHandlers.run_bind)."""

    def __init__(self, verbs: VerbHandlers) -> None:
        super().__init__(verbs, "bind", work=None)

    async def answer_body(self, arrived: float, body: bytes) -> tuple[bytes, int]:
        return await self.verbs.run_bind(arrived, body)


def verb_routes(verbs: VerbHandlers) -> list[tuple[str, VerbRoute]]:
    """(path, route) of every scheduler verb: the protocol's (under KSO_URL_PREFIX), kube-safe-scheduler's per-agent
    routes (one per predicate and priority of the enabled agents) and the image-score example's; a path listed
    twice is served by its first route, as in FastAPI."""
    extender = verbs.extender
    s = extender.settings
    filter_route = VerbRoute(verbs, "filter", verbs.filter_body, verbs.filter_all_pass)
    prioritize_route = VerbRoute(verbs, "prioritize", verbs.prioritize_body, verbs.prioritize_neutral)
    bind_route = BindRoute(verbs)
    preempt_route = VerbRoute(verbs, "preempt", verbs.preempt_body, verbs.preempt_echo)
    prefix = "/" + s.url_prefix.strip("/") if s.url_prefix.strip("/") else ""
    routes = [(f"{prefix}/filter", filter_route), (f"{prefix}/prioritize", prioritize_route),
              (f"{prefix}/bind", bind_route), (f"{prefix}/preempt", preempt_route), ("/scheduler/bind", bind_route)]
    for name in extender.predicates:
        routes.append((f"/scheduler/predicates/{name}",
                       VerbRoute(verbs, "filter", partial(verbs.predicate_body, name), verbs.filter_all_pass)))
    image_params = extender.config.agent_params.get("image")
    for name in extender.priorities:
        route = VerbRoute(verbs, "prioritize", partial(verbs.priority_body, name), verbs.prioritize_neutral)
        routes.append((f"/scheduler/priorities/{name}", route))
        if name == "image_score" and image_params is not None:
            # The image-score example's route: <api-prefix>/<priorities-prefix>/image_score.
            path = "/" + "/".join(p.strip("/") for p in (image_params.api_prefix, image_params.priorities_prefix,
                                                         "image_score") if p.strip("/"))
            routes.append((path, route))
    return routes


def add_verb_routes(app: FastAPI, verbs: VerbHandlers) -> dict[str, RawEndpoint]:
    """The scheduler verbs as FastAPI routes; returns the same handlers by exact path, for HotRoutes."""
    hot: dict[str, RawEndpoint] = {}
    for path, route in verb_routes(verbs):
        app.add_api_route(path, route.endpoint, methods=["POST"], include_in_schema=False)
        hot.setdefault(path, route)  # the first route registered for a path wins, as in FastAPI
    return hot


@contextlib.asynccontextmanager
async def closing_the_binder(app: FastAPI) -> AsyncIterator[None]:
    """The app's lifespan: once requests have drained, the binder's session is closed on the loop that served it."""
    yield
    await app.state.extender.aclose()


async def version(request: Request) -> Response:
    return Response(VERSION, media_type="text/plain")


def create_app(extender: Extender, admin_routes: bool = True) -> FastAPI:
    """The scheduler-facing app; with ``admin_routes`` it serves /metrics, /healthz and /readyz as well
    (tests, demos, or a server without an admin port)."""
    # redirect_slashes off: "/filter/" is a 404, never a 307 whose Location comes from the Host header.
    app = FastAPI(title="kube-safe-optimizer extender", version=VERSION, docs_url=None, redoc_url=None,
                  openapi_url=None, redirect_slashes=False, lifespan=closing_the_binder)
    app.state.extender = extender
    verbs = app.state.verbs = VerbHandlers(extender)
    hot = add_verb_routes(app, verbs)
    app.add_api_route("/version", version, methods=["GET"])
    if admin_routes:
        add_admin_routes(app)
    app.add_api_route("/debug/explain", explain_get, methods=["GET"])
    app.add_api_route("/debug/explain", explain_post, methods=["POST"], include_in_schema=False)
    app.add_middleware(HotRoutes, routes=hot)
    app.state.bind_queue = verbs.bind_queue
    app.state.hot_routes = hot  # serve() puts them in front of the whole app too (see outermost_hot_routes)
    return app


def outermost_hot_routes(app: FastAPI) -> HotRoutes:
    """The scheduler verbs ahead of FastAPI's whole middleware stack (ServerErrorMiddleware, the middleware
    build on each call). Their handlers catch every error themselves, so they never needed the stack; the
    HotRoutes inside create_app stays for callers (tests, the demo) that serve the FastAPI app directly."""
    return HotRoutes(app, app.state.hot_routes)


# ---- /debug/explain: on a worker thread (it walks every node of the call in Python); off or loopback-only
# unless KSO_DEBUG_ROUTES=ON ----
def debug_allowed(setting: str, client_host: str | None) -> bool:
    """KSO_DEBUG_ROUTES: ON answers anyone, LOOPBACK only clients on this host, OFF nobody."""
    return setting == "ON" or (setting == "LOOPBACK" and client_host in LOOPBACK_HOSTS)


def debug_refused(request: Request) -> Response | None:
    """The 404 of a /debug request KSO_DEBUG_ROUTES does not allow, else None."""
    setting = request.app.state.extender.settings.debug_routes
    if debug_allowed(setting, request.client.host if request.client else None):
        return None
    return _json({"Error": f"/debug routes are {'off' if setting == 'OFF' else 'for loopback clients only'}"
                           " (KSO_DEBUG_ROUTES)"}, 404)


def explain_pod(extender: Extender, ref: str, uid: str, nodes: str) -> tuple[bytes, int]:
    """/debug/explain's GET: a pod kso knows (``ref`` namespace/name, or ``uid``) on the named nodes, or all."""
    ns, _, name = ref.rpartition("/")
    pod = extender.state.pending_pod(uid, ns or "default", name)
    if pod is None:
        return dumps({"Error": f"pod {ref or uid!r} unknown: kso knows pods it was asked about "
                               "or that its cache lists; give ?pod=namespace/name or POST an ExtenderArgs body"}), 404
    names = [n for n in nodes.split(",") if n] or extender.state.node_names()
    limits = extender.limits
    if len(names) > limits.max_nodes:
        return dumps({"Error": f"explain: {len(names)} nodes, more than the {limits.max_nodes} allowed per request "
                               "(KSO_MAX_NODES); name fewer with ?nodes=a,b"}), 400
    return dumps(extender.explain(pod, extender.state.view(names))), 200


async def explain_get(request: Request) -> Response:
    if (no := debug_refused(request)) is not None:
        return no
    q = request.query_params
    payload, status = await run_in_threadpool(explain_pod, request.app.state.extender, q.get("pod", ""),
                                              q.get("uid", ""), q.get("nodes", ""))
    return Response(payload, status_code=status, media_type=JSON)


async def explain_post(request: Request) -> Response:
    if (no := debug_refused(request)) is not None:
        return no
    verbs: VerbHandlers = request.app.state.verbs
    try:
        body = await read_body(request, verbs.max_body)
    except ProtocolError as exc:
        return _json({"Error": f"explain: {exc}"}, 400)
    payload, status = await run_in_threadpool(verbs.answer, "explain", verbs.explain_body, None, body)
    return Response(payload, status_code=status, media_type=JSON)


# ---- admin routes: /healthz, /readyz, /metrics ----
class CacheStaleness:
    """Whether the node cache fed by the API server's watch is stale, with a log line when staleness starts,
    when it makes /readyz 503, and when it ends. Checked on each /readyz (the kubelet's probe), so a line
    comes at the first probe past a threshold and states the age it found."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stale_since: float | None = None  # wall clock of the last word from the source, while stale
        self.unready = False

    def check(self, age: float, stale_after: float, unready_after: float) -> tuple[bool, bool]:
        """(stale, unready) for a cache last heard ``age`` seconds ago."""
        stale = age > stale_after
        unready = stale and unready_after > 0 and age > unready_after
        with self._lock:
            if stale and self.stale_since is None:
                self.stale_since = time.time() - age if math.isfinite(age) else time.time()
                log.warning("node cache stale: nothing heard from the API server for %s (KSO_CACHE_STALE_S %g s); "
                            "filter and prioritize answer from the cache as it was; /readyz turns 503 %s",
                            _seconds(age), stale_after,
                            f"past {unready_after:g} s (KSO_READY_MAX_CACHE_AGE_S)" if unready_after > 0 else "never")
            if unready and not self.unready:
                log.error("node cache stale for %s, past KSO_READY_MAX_CACHE_AGE_S %g s: /readyz answers 503",
                          _seconds(age), unready_after)
            if not stale and self.stale_since is not None:
                log.warning("node cache fresh again: the API server was heard after %.0f s without word",
                            time.time() - age - self.stale_since)
                self.stale_since = None
            self.unready = unready
        return stale, unready


def _seconds(age: float) -> str:
    return f"{age:.0f} s" if math.isfinite(age) else "ever"


def readiness(extender: Extender, staleness: CacheStaleness | None = None) -> tuple[dict[str, Any], int]:
    """/readyz: ready once the node cache has synced, and (fed by the API server's watch) while it has heard
    from the API server within KSO_READY_MAX_CACHE_AGE_S. The body always gives the cache's age and its
    "fresh" condition (stale past KSO_CACHE_STALE_S, still 200: kube-scheduler keeps calling kso through
    a short outage or a watch reconnect). The forecast source's health is detail too (forecasts failing do
    not make kso unready: the safe agent falls back to node annotations)."""
    st = extender.state
    s = extender.settings
    body: dict[str, Any] = {"ready": st.synced, "source": st.source, "nodes": len(st)}
    status = 200 if st.synced else 503
    if not st.synced:
        body["reason"] = "node cache has not synced yet"
    elif st.source == "api":  # a snapshot or the demo has no source to hear from: never stale
        age = st.age_seconds()
        stale, unready = (staleness or CacheStaleness()).check(age, s.cache_stale_s, s.ready_max_cache_age_s)
        body["cache"] = {
            "age_s": round(age, 1) if math.isfinite(age) else None, "stale": stale,
            "stale_after_s": s.cache_stale_s, "unready_after_s": s.ready_max_cache_age_s or None,
            "condition": (f"stale: nothing heard from the API server for {_seconds(age)} (over {s.cache_stale_s:g} s)"
                          if stale else f"fresh: API server heard {_seconds(age)} ago (stale after {s.cache_stale_s:g} s)")}
        if unready:
            body["ready"], status = False, 503
            body["reason"] = (f"node cache stale for {_seconds(age)}, over KSO_READY_MAX_CACHE_AGE_S "
                              f"{s.ready_max_cache_age_s:g} s")
    fs = extender.forecast_status
    if fs is not None:
        age = None if fs.last_success is None else round(time.time() - fs.last_success, 3)
        body["forecasts"] = {"source": fs.source, "last_success_age_s": age, "consecutive_failures": fs.consecutive_failures,
                             "last_error": fs.last_error, "healthy": fs.last_success is not None and fs.consecutive_failures == 0}
        health = getattr(extender, "forecast_health", None)
        if health is not None:  # stays 200: kso still answers safely, but the body says what it judges with
            body["forecasts"].update(health.snapshot())
    return body, status


async def healthz(request: Request) -> Response:
    return Response("ok", media_type="text/plain")


async def readyz(request: Request) -> Response:
    body, status = readiness(request.app.state.extender, request.app.state.cache_staleness)
    return _json(body, status)


async def prometheus_metrics(request: Request) -> Response:
    # The forecasting layer counts its input decisions (spikes removed, units fixed, ...) in its own
    # registry, since it cannot import the extender's; both are served here.
    body = generate_latest(request.app.state.extender.metrics.registry) + generate_latest(FORECAST_INPUT_REGISTRY)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def add_admin_routes(app: FastAPI) -> None:
    app.state.cache_staleness = CacheStaleness()
    app.add_api_route("/healthz", healthz, methods=["GET"])
    app.add_api_route("/readyz", readyz, methods=["GET"])
    app.add_api_route("/metrics", prometheus_metrics, methods=["GET"])


def create_admin_app(extender: Extender) -> FastAPI:
    """The admin port's app: /metrics, /healthz, /readyz, /version, nothing else."""
    app = FastAPI(title="kube-safe-optimizer admin", version=VERSION, docs_url=None, redoc_url=None, openapi_url=None,
                  redirect_slashes=False)
    app.state.extender = extender
    app.add_api_route("/version", version, methods=["GET"])
    add_admin_routes(app)
    return app
