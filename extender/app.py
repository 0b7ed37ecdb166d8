"""HTTP routes: the kube-scheduler extender protocol, kube-safe-scheduler's and the image-score
example's routes, /debug/explain, /metrics, /healthz, /readyz.

Handlers read the raw body and answer bytes: FastAPI's request models and response validation are
bypassed on the hot path on purpose (a pydantic model of a whole Pod costs more than the decision).
The POST routes of the scheduler verbs are also served by a pure-ASGI front (``HotRoutes``) that finds
them by exact path and answers without FastAPI's router, dependency solving and per-request exit stack
(~0.1 ms per call); anything else, and any request with a root path, goes through FastAPI as before,
to the same handlers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from extender.protocol import (
    ProtocolError,
    dumps,
    parse_binding_args,
    parse_extender_args,
    parse_preemption_args,
)
from extender.service import Extender

log = logging.getLogger("kso.extender.http")

VERSION = "0.1.0"
JSON = "application/json"
JSON_BYTES = JSON.encode()


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


def create_app(extender: Extender) -> FastAPI:
    s = extender.settings
    metrics = extender.metrics
    image_params = extender.config.agent_params.get("image")
    app = FastAPI(title="kube-safe-optimizer extender", version=VERSION, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.extender = extender

    hot: dict[str, RawEndpoint] = {}

    def handler(verb: str, work: Callable[[bytes], Any], fallback: Callable[[bytes], Any] | None = None,
                threaded: bool = False) -> tuple[Callable[[Request], Awaitable[Response]], RawEndpoint]:
        """Wrap one verb: read the body within the limit, time it, map errors to 400 with a message,
        and turn any unexpected failure into the verb's safe answer (never a 500). Returns the FastAPI
        endpoint and the same handler as a bare ASGI endpoint (for HotRoutes)."""
        latency = metrics.latency.labels(verb)
        limit = s.max_body_bytes

        async def respond(read: Callable[[], Awaitable[bytes]]) -> tuple[bytes, int]:
            start = time.perf_counter()
            body = b""
            try:
                body = await read()
                result = await run_in_threadpool(work, body) if threaded else work(body)
                return (result if isinstance(result, bytes) else dumps(result)), 200  # bytes: encoded already
            except ProtocolError as exc:
                metrics.errors.labels(verb, exc.kind).inc()
                log.warning("%s: 400 %s: %s", verb, exc.kind, exc)
                return dumps({"Error": f"{verb}: {exc}"}), 400
            except Exception as exc:  # noqa: BLE001 - fail open, loudly, instead of a 500
                metrics.errors.labels(verb, "internal").inc()
                log.exception("%s: internal error; answering with the safe fallback", verb)
                if fallback is not None:
                    try:
                        return dumps(fallback(body)), 200
                    except Exception:  # noqa: BLE001
                        log.exception("%s: fallback failed too", verb)
                return dumps({"Error": f"{verb}: internal error in kso: {type(exc).__name__}: {exc}"}), 200
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

    def route(path: str, endpoints: tuple[Callable[[Request], Awaitable[Response]], RawEndpoint]) -> None:
        app.add_api_route(path, endpoints[0], methods=["POST"], include_in_schema=False)
        hot.setdefault(path, endpoints[1])  # the first route registered for a path wins, as in FastAPI

    def filter_all_pass(body: bytes) -> dict[str, Any]:
        args = parse_extender_args(body)
        if args.nodes is not None:
            return {"Nodes": args.node_list, "NodeNames": None, "FailedNodes": {},
                    "FailedAndUnresolvableNodes": {}, "Error": ""}
        return {"NodeNames": args.node_names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}

    def prioritize_neutral(body: bytes) -> list[dict[str, Any]]:
        args = parse_extender_args(body)
        names = args.node_names if args.nodes is None else [
            (n.get("metadata") or {}).get("name", "") for n in args.nodes]
        return [{"Host": n, "Score": 0} for n in names or []]

    def preempt_echo(body: bytes) -> dict[str, Any]:
        args = parse_preemption_args(body)
        return {"NodeNameToMetaVictims": {n: {"Pods": [{"UID": u} for u in v.uids],
                                              "NumPDBViolations": v.pdb_violations}
                                          for n, v in args.candidates.items()}}

    filter_ep = handler("filter", lambda b: extender.filter(parse_extender_args(b)), filter_all_pass)
    prioritize_ep = handler("prioritize", lambda b: extender.prioritize_json(parse_extender_args(b)), prioritize_neutral)
    bind_ep = handler("bind", lambda b: extender.bind(parse_binding_args(b)), threaded=True)
    preempt_ep = handler("preempt", lambda b: extender.preempt(parse_preemption_args(b)), preempt_echo)

    prefix = "/" + s.url_prefix.strip("/") if s.url_prefix.strip("/") else ""
    for verb, ep in (("filter", filter_ep), ("prioritize", prioritize_ep), ("bind", bind_ep), ("preempt", preempt_ep)):
        route(f"{prefix}/{verb}", ep)
    route("/scheduler/bind", bind_ep)

    # kube-safe-scheduler's per-agent routes, one per predicate and priority of the enabled agents.
    for name in extender.predicates:
        ep = handler("filter", lambda b, n=name: extender.filter(parse_extender_args(b), [n]), filter_all_pass)
        route(f"/scheduler/predicates/{name}", ep)
    for name in extender.priorities:
        ep = handler("prioritize", lambda b, n=name: extender.priority(n, parse_extender_args(b)), prioritize_neutral)
        route(f"/scheduler/priorities/{name}", ep)
        if name == "image_score" and image_params is not None:
            # The image-score example's route: <api-prefix>/<priorities-prefix>/image_score.
            path = "/" + "/".join(p.strip("/") for p in (image_params.api_prefix, image_params.priorities_prefix,
                                                         "image_score") if p.strip("/"))
            route(path, ep)

    @app.get("/version")
    async def version() -> Response:
        return Response(VERSION, media_type="text/plain")

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response("ok", media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> Response:
        st = extender.state
        if st.synced:
            return _json({"ready": True, "source": st.source, "nodes": len(st)})
        return _json({"ready": False, "reason": "node cache has not synced yet", "source": st.source}, 503)

    @app.get("/metrics")
    async def prom_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/debug/explain")
    async def explain_get(request: Request) -> Response:
        q = request.query_params
        ref = q.get("pod", "")
        ns, _, name = ref.rpartition("/")
        pod = extender.state.pending_pod(q.get("uid", ""), ns or "default", name)
        if pod is None:
            return _json({"Error": f"pod {ref or q.get('uid', '')!r} unknown: kso knows pods it was asked about "
                                   "or that its cache lists; give ?pod=namespace/name or POST an ExtenderArgs body"},
                         404)
        nodes = [n for n in q.get("nodes", "").split(",") if n] or extender.state.node_names()
        return _json(extender.explain(pod, extender.state.view(nodes)))

    async def explain_post(request: Request) -> Response:
        try:
            args = parse_extender_args(await read_body(request, s.max_body_bytes))
            pod = extender.parse_pod(args.pod)
            return _json(extender.explain(pod, extender.resolve(args)))
        except ProtocolError as exc:
            metrics.errors.labels("explain", exc.kind).inc()
            return _json({"Error": f"explain: {exc}"}, 400)

    app.add_api_route("/debug/explain", explain_post, methods=["POST"], include_in_schema=False)
    app.add_middleware(HotRoutes, routes=hot)
    return app
