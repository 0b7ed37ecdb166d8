"""Acting on a migration plan (``kso reoptimize --execute``): evictions, events and the published plan.

Evictions go through the Eviction API (policy/v1), so PodDisruptionBudgets hold, one pod at a time: a
refusal (429: no disruption left in a budget, or throttling) is retried with backoff within the run's
eviction deadline; a pod that is gone (404), a conflict (409) or a server error is reported and skipped.
Each eviction and each skipped move is recorded as a Kubernetes Event on the pod; the target plan (the
evicted pods' landing slots) is published to KSO_PLAN_FILE and to ConfigMap ``kso-plan`` (key
``plan.json``) so the extender places the replacement pods where the plan
says. Which pods may be moved at all is optimizer.reoptimize.eligibility.
"""

from __future__ import annotations

import datetime as dt
import socket
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kso.core.cluster_source import REQUEST_TIMEOUT_S, RawCluster, response_body

EVENT_COMPONENT = "kso-reoptimize"
REASON_EVICTED = "KsoReoptimizeEvicted"
REASON_SKIPPED = "KsoReoptimizeSkipped"
PLAN_CONFIGMAP = "kso-plan"
PLAN_KEY = "plan.json"
MOVES_KEY = "moves.json"  # each move of the run and what happened to it
SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_PLAN_NAMESPACE = "kso-system"
CONFIGMAP_LIMIT = 1024 * 1024  # bytes of data a ConfigMap may hold
# Evictions refused with 429 are retried within the run's deadline (--eviction-deadline): a budget frees a
# disruption once a replacement pod is Ready, which takes a scheduling and a container start.
DEFAULT_EVICTION_DEADLINE_S = 60.0
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 10.0


@dataclass
class Outcome:
    move: Any  # optimizer.reoptimize.migration_result.Move
    evicted: bool
    detail: str  # "evicted" or why not
    status: int | None = None  # HTTP status of a failed eviction


@dataclass
class Execution:
    outcomes: list[Outcome] = field(default_factory=list)
    event_errors: list[str] = field(default_factory=list)
    published: list[str] = field(default_factory=list)
    plan_id: str = ""
    publish_errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.evicted and o.status is not None]


def eviction_failure(exc: Any) -> tuple[int | None, str]:
    from kubernetes.client.exceptions import ApiException

    from kso.core.kube import api_message

    if isinstance(exc, ApiException):
        status = exc.status
        message = api_message(exc)
        try:  # the PDB refusal names the budget in details.causes
            causes = (orjson.loads(exc.body or b"{}").get("details") or {}).get("causes") or []
        except (orjson.JSONDecodeError, AttributeError):
            causes = []
        extra = "; ".join(str(c.get("message")) for c in causes if isinstance(c, dict) and c.get("message"))
        if extra:
            message = f"{message} ({extra})"
        if status == 429:
            return status, f"refused (429, PodDisruptionBudget): {message}"
        if status == 404:
            return status, f"pod gone (404): {message}"
        if status == 409:
            return status, f"conflict (409, the pod changed): {message}"
        return status, f"HTTP {status}: {message}"
    return 0, f"request failed: {type(exc).__name__}: {exc}"


def evict(core: Any, move: Any) -> tuple[bool, int | None, str]:
    """One eviction request. Returns (evicted, HTTP status on failure, detail)."""
    from kubernetes import client

    body = client.V1Eviction(
        api_version="policy/v1", kind="Eviction",
        metadata=client.V1ObjectMeta(name=move.pod, namespace=move.namespace),
        # The uid is a precondition: a pod re-created under the same name is not evicted by mistake.
        delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=move.uid) if move.uid else None),
    )
    try:
        # Raw response: the API answers with a Status, not an Eviction.
        response_body(core.create_namespaced_pod_eviction(move.pod, move.namespace, body, _preload_content=False,
                                                  _request_timeout=REQUEST_TIMEOUT_S))
    except Exception as exc:  # noqa: BLE001 - every failure is reported and the move skipped
        status, detail = eviction_failure(exc)
        return False, status, detail
    return True, None, "evicted"


def record_event(core: Any, move: Any, reason: str, message: str, warning: bool) -> str | None:
    """Record a core/v1 Event on the pod; returns an error message instead of raising."""
    from kubernetes import client

    now = dt.datetime.now(dt.UTC)
    body = client.CoreV1Event(
        api_version="v1", kind="Event",
        metadata=client.V1ObjectMeta(name=f"{move.pod[:236]}.{uuid.uuid4().hex[:16]}", namespace=move.namespace),
        involved_object=client.V1ObjectReference(api_version="v1", kind="Pod", name=move.pod, namespace=move.namespace,
                                                 uid=move.uid or None),
        reason=reason, message=message[:1024], type="Warning" if warning else "Normal",
        source=client.V1EventSource(component=EVENT_COMPONENT), reporting_component=EVENT_COMPONENT,
        reporting_instance=socket.gethostname(), first_timestamp=now, last_timestamp=now, count=1,
        action="Evict",
    )
    try:
        response_body(core.create_namespaced_event(move.namespace, body, _preload_content=False,
                                                   _request_timeout=REQUEST_TIMEOUT_S))
    except Exception as exc:  # noqa: BLE001 - an event that cannot be written is reported, not fatal
        _, detail = eviction_failure(exc)
        return f"event {reason} on {move.namespace}/{move.pod}: {detail}"
    return None


def _limit_reached(limits: Any, total: int, per_node: Counter[str], per_ns: Counter[str], move: Any) -> str | None:
    # The model already keeps within the limits; this is the last line, should it ever not.
    if limits.max_moves is not None and total >= limits.max_moves:
        return f"--max-moves {limits.max_moves} reached"
    if limits.max_per_node is not None and per_node[move.from_node] >= limits.max_per_node:
        return f"--max-per-node {limits.max_per_node} reached on {move.from_node}"
    if limits.max_per_namespace is not None and per_ns[move.namespace] >= limits.max_per_namespace:
        return f"--max-per-namespace {limits.max_per_namespace} reached in {move.namespace}"
    return None


def execute(cluster: RawCluster, result: Any, limits: Any, deadline_s: float = DEFAULT_EVICTION_DEADLINE_S) -> Execution:
    """Evict the moves in order (risk first), within the limits; record one event per move. Evictions
    refused with 429 (a PodDisruptionBudget with no disruption left until a replacement pod is Ready, or the
    API server's throttling) are retried, all of them each round, after a growing pause (RETRY_FIRST_S,
    doubling up to RETRY_MAX_S) while the next round starts within ``deadline_s`` of the first eviction;
    any other failure is final."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client)
    out = Execution()
    total = 0
    per_node: Counter[str] = Counter()
    per_ns: Counter[str] = Counter()
    start = time.monotonic()
    attempts: Counter[int] = Counter()
    final: dict[int, Outcome] = {}
    refused: list[tuple[Any, Outcome]] = []

    def attempt(move: Any) -> Outcome:
        nonlocal total
        limit = _limit_reached(limits, total, per_node, per_ns, move)
        if limit:
            return Outcome(move, False, f"skipped: {limit}")
        attempts[id(move)] += 1
        ok, status, detail = evict(core, move)
        if ok:
            total += 1
            per_node[move.from_node] += 1
            per_ns[move.namespace] += 1
        return Outcome(move, ok, detail, status)

    def evict_all(moves: list[Any]) -> list[tuple[Any, Outcome]]:
        """One round; returns the moves refused with 429."""
        again = []
        for move in moves:
            o = attempt(move)
            if o.status == 429:
                again.append((move, o))
            else:
                final[id(move)] = o
        return again

    refused = evict_all(result.moves)
    pause = RETRY_FIRST_S
    while refused and time.monotonic() + pause - start <= deadline_s:
        time.sleep(pause)
        pause = min(pause * 2, RETRY_MAX_S)
        refused = evict_all([move for move, _ in refused])
    for move, o in refused:
        n = attempts[id(move)]
        if n > 1:
            o.detail += f" (tried {n} times within the {deadline_s:g} s eviction deadline)"
        final[id(move)] = o
    for move in result.moves:
        o = final[id(move)]
        out.outcomes.append(o)
        if o.evicted:
            tries = attempts[id(move)]
            err = record_event(core, move, REASON_EVICTED,
                               f"evicted by kso reoptimize ({move.reason}): from node {move.from_node}, planned to land "
                               f"on {move.to_node}" + (f" (after {tries - 1} refusals)" if tries > 1 else ""), False)
        elif o.status is None:
            err = record_event(core, move, REASON_SKIPPED,
                               f"kso reoptimize did not evict this pod: {o.detail.removeprefix('skipped: ')}", True)
        else:
            err = record_event(core, move, REASON_SKIPPED, f"kso reoptimize could not evict this pod: {o.detail}", True)
        if err:
            out.event_errors.append(err)
    return out


def plan_namespace(flag: str | None) -> str:
    if flag:
        return flag
    try:
        ns = Path(SA_NAMESPACE_FILE).read_text().strip()
    except OSError:
        ns = ""
    return ns or DEFAULT_PLAN_NAMESPACE


def move_states(moves: list[Any], execution: Execution | None) -> dict[str, Any]:
    """The ``moves.json`` document: every move of the run with its state. Without ``execution`` (before
    the first eviction) every move is "pending"; after it: evicted, refused (429), failed (another
    error), or skipped (a limit reached)."""
    done = {id(o.move): o for o in execution.outcomes} if execution is not None else {}
    rows = []
    for m in moves:
        o = done.get(id(m))
        if o is None:
            state, detail = "pending" if execution is None else "not attempted", ""
        elif o.evicted:
            state, detail = "evicted", o.detail
        elif o.status == 429:
            state, detail = "refused", o.detail
        elif o.status is not None:
            state, detail = "failed", o.detail
        else:
            state, detail = "skipped", o.detail
        rows.append({"pod": m.pod, "namespace": m.namespace, "from": m.from_node, "to": m.to_node,
                     "class": m.class_key, "state": state, **({"detail": detail} if detail else {})})
    return {"phase": "evicting" if execution is None else "done", "moves": rows}


# What each node of a plan holds for a reader that checks its risks (the loads before and after, the capacity and
# where the load comes from): several times the bytes of what the extender reads (headroom, risk, used).
CHECK_ONLY_NODE_FIELDS = ("before", "after", "capacity", "loadSource")


def without_node_loads(doc: dict[str, Any]) -> dict[str, Any]:
    """The plan document without CHECK_ONLY_NODE_FIELDS: what the extender follows, for a ConfigMap the whole plan
    would overflow (a large cluster); the fields are optional on load."""
    return {**doc, "nodes": {name: {k: v for k, v in node.items() if k not in CHECK_ONLY_NODE_FIELDS}
                             for name, node in doc["nodes"].items()}}


def publish(plan: Any, api_client: Any, namespace: str, plan_file: str, execution: Execution,
            moves: dict[str, Any] | None = None) -> None:
    """The plan to KSO_PLAN_FILE (if set) and to ConfigMap kso-plan (created or replaced), with the
    moves' states (``move_states``) under key moves.json; failures are recorded in ``execution``, never
    raised."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from kso.core.kube import api_message
    from optimizer.plan.placement_plan import write_plan

    execution.plan_id = plan.plan_id
    if plan_file:
        try:
            write_plan(plan, plan_file)
            execution.published.append(f"file {plan_file}")
        except OSError as exc:
            execution.publish_errors.append(f"plan file {plan_file}: {exc.strerror or exc}")
    doc = plan.to_dict()
    data = orjson.dumps(doc).decode()
    where = f"ConfigMap {namespace}/{PLAN_CONFIGMAP}"
    moves_bytes = len(orjson.dumps(moves)) if moves is not None else 0
    compact = ""
    if len(data) + moves_bytes > CONFIGMAP_LIMIT:
        data = orjson.dumps(without_node_loads(doc)).decode()
        compact = ", without the nodes' loads (the plan file has them)"
    if len(data) + moves_bytes > CONFIGMAP_LIMIT:
        execution.publish_errors.append(f"{where}: the plan is {len(data)} bytes, over the ConfigMap limit")
        return
    core = client.CoreV1Api(api_client)
    body = client.V1ConfigMap(
        api_version="v1", kind="ConfigMap",
        metadata=client.V1ObjectMeta(name=PLAN_CONFIGMAP, namespace=namespace,
                                     labels={"app.kubernetes.io/name": "kso", "app.kubernetes.io/component": "plan",
                                             "app.kubernetes.io/managed-by": EVENT_COMPONENT}),
        data={PLAN_KEY: data, **({MOVES_KEY: orjson.dumps(moves).decode()} if moves is not None else {})})
    try:
        try:
            current = orjson.loads(response_body(core.read_namespaced_config_map(
                PLAN_CONFIGMAP, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)))
        except ApiException as exc:
            if exc.status != 404:
                raise
            response_body(core.create_namespaced_config_map(namespace, body, _preload_content=False,
                                                    _request_timeout=REQUEST_TIMEOUT_S))
            execution.published.append(f"{where} (created{compact})")
            return
        body.metadata.resource_version = (current.get("metadata") or {}).get("resourceVersion")
        response_body(core.replace_namespaced_config_map(PLAN_CONFIGMAP, namespace, body, _preload_content=False,
                                                 _request_timeout=REQUEST_TIMEOUT_S))
        execution.published.append(f"{where} (replaced{compact})")
    except ApiException as exc:
        execution.publish_errors.append(f"{where}: HTTP {exc.status}: {api_message(exc)}")
    except Exception as exc:  # noqa: BLE001 - publishing is best effort; the evictions are done
        execution.publish_errors.append(f"{where}: {type(exc).__name__}: {exc}")
