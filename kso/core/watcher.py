"""The list+watch mirror of nodes and pods into ClusterState (``ClusterWatcher``).

ClusterWatcher is a small reflector (client-go's list-then-watch loop) for two resources. It reads raw
JSON (orjson) instead of the client's models: building a V1Pod per pod costs far more than kso's own
parse, and a big cluster's pod list would take seconds and hundreds of MB as models.
"""

from __future__ import annotations

import gc
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from kso.core.cluster import ClusterState
from kso.core.kube import HTTP_GONE, api_message
from kso.core.objects import NodeInfo, ObjectError, PodInfo, PodMemo, node_from_k8s

log = logging.getLogger("kso.core.kube")

# Terminal pods hold no resources on their node, and in a busy cluster they outnumber live ones (Jobs);
# the server drops them from the list and, for the watch, sends DELETED when a pod becomes terminal.
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


class RawWatch(watch.Watch):
    """Watch that hands out events as parsed JSON only.

    The stock Watch turns every event into a model (V1Pod) — a json.loads, a json.dumps and a model
    build per event — and ``deserialize=False`` is no way out: that path skips 'raw_object', so an
    ERROR event then fails with KeyError inside the client instead of raising ApiException(410).
    Overriding unmarshal_event keeps the client's ERROR handling and parses each line once."""

    def unmarshal_event(self, data: str, return_type: Any) -> dict[str, Any] | None:
        if not data or data.isspace():
            return None
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(event, dict):
            return None
        obj = event.get("object")
        event["raw_object"] = obj
        if event.get("type") != "ERROR" and isinstance(obj, dict):
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = rv  # what the base class tracks for its own resumption
        return event


class Reflector:
    """List+watch state of one resource."""

    def __init__(self, kind: str, list_fn: Callable[..., Any], field_selector: str) -> None:
        self.kind = kind  # "nodes" or "pods"
        self.list_fn = list_fn
        self.field_selector = field_selector
        self.resource_version = ""
        self.listed = threading.Event()
        self.watch: RawWatch | None = None
        self.thread: threading.Thread | None = None


class ClusterWatcher:
    """Keeps ``state`` equal to the API server's nodes and non-terminal pods (list, then watch).

    Two daemon threads, one per resource. On 410 Gone the resource is listed again; on other errors
    the watch is retried with bounded exponential backoff and jitter, and after
    ``relist_after_failures`` failures in a row it is listed again. A re-list updates the state in
    place, so the previous contents keep serving until the new list is in."""

    def __init__(
        self,
        state: ClusterState,
        api_client: client.ApiClient,
        *,
        resync_backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        watch_timeout_s: float = 300.0,
        request_timeout_s: float = 30.0,
        page_size: int = 500,
        relist_after_failures: int = 5,
        assume_grace_s: float = 30.0,
        pod_memo: PodMemo | None = None,
        freeze_after_list: bool = False,
    ) -> None:
        self.state = state
        # After each complete list, move what the process holds (the cache just listed: at 150k pods, a million
        # objects) out of the garbage collector's reach (gc.freeze): otherwise every full collection walks it, a
        # 300 ms pause of every thread, filter's included. For a process that owns its collector (the extender).
        self.freeze_after_list = freeze_after_list
        # Pods are parsed through the extender's memo: kube-scheduler asks about each pending pod as the watch has
        # just seen it, so its filter call need not parse it again, and most of a pod's later events (its bind, the
        # first step of its deletion) change nothing a parse reads, so the watch need not either.
        self.pod_memo = pod_memo if pod_memo is not None else PodMemo()
        self.resync_backoff_s = resync_backoff_s
        self.max_backoff_s = max_backoff_s
        self.watch_timeout_s = watch_timeout_s
        self.request_timeout_s = request_timeout_s
        self.page_size = page_size
        self.relist_after_failures = relist_after_failures
        self.assume_grace_s = assume_grace_s
        core = client.CoreV1Api(api_client)
        self._nodes = Reflector("nodes", core.list_node, "")
        self._pods = Reflector("pods", core.list_pod_for_all_namespaces, POD_FIELD_SELECTOR)
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._counter_lock = threading.Lock()
        # Pods this watcher put into the state, bound or pending: ClusterState does not list its
        # pending pods, and a re-list must forget those that are gone.
        self._known_pods: set[str] = set()
        self.relists = 0
        self.events = 0
        self.errors = 0
        self.skipped = 0  # objects that failed to parse
        self.last_error = ""

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._nodes.thread is not None:
            return
        self._stop.clear()
        for res in (self._nodes, self._pods):
            res.thread = threading.Thread(target=self._run, args=(res,), name=f"kso-watch-{res.kind}", daemon=True)
            res.thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop both threads; True when they ended within ``timeout``."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for res in (self._nodes, self._pods):
            while res.thread is not None and res.thread.is_alive() and time.monotonic() < deadline:
                # Repeated: Watch.stream() resets its stop flag when it starts, so a stop() that lands
                # between two watches would otherwise be lost until the watch times out.
                w = res.watch
                if w is not None:
                    w.stop()
                res.thread.join(0.05)
        return not any(r.thread is not None and r.thread.is_alive() for r in (self._nodes, self._pods))

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def stats(self) -> dict[str, Any]:
        with self._counter_lock:
            return {
                "synced": self.synced,
                "relists": self.relists,
                "events": self.events,
                "errors": self.errors,
                "skipped": self.skipped,
                "last_error": self.last_error,
                "nodes_resource_version": self._nodes.resource_version,
                "pods_resource_version": self._pods.resource_version,
            }

    # ---- the loop ----------------------------------------------------------------------------
    def _run(self, res: Reflector) -> None:
        if res is self._pods:
            # Nodes first, so the first pod list lands on known nodes (and the order is the one the
            # initial sync promises); the pod thread waits for it but not past stop().
            while not self._nodes.listed.wait(0.1):
                if self._stop.is_set():
                    return
        need_list = True
        failures = 0  # consecutive, for backoff and for the re-list decision
        gone_streak = 0  # 410s right after a list: back off instead of hammering the list
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list(res)
                    need_list = False
                    failures = 0
                    continue
                started = time.monotonic()
                seen = self._watch(res)
            except ApiException as exc:
                if self._stop.is_set():
                    break
                if exc.status == HTTP_GONE:
                    gone_streak += 1
                    log.info("watch of %s expired (410 Gone: %s); listing again", res.kind, exc.reason)
                    need_list = True
                    if gone_streak > 1:
                        self._sleep(gone_streak - 1)
                    continue
                failures += 1
                self._failed(res, exc, f"HTTP {exc.status}: {api_message(exc)}")
            except Exception as exc:  # a watcher thread must never die: log, back off, retry
                if self._stop.is_set():
                    break
                failures += 1
                self._failed(res, exc, f"{type(exc).__name__}: {exc}")
            else:
                if self._stop.is_set():
                    break
                gone_streak = 0
                if seen == 0 and time.monotonic() - started < 1.0:
                    # A watch that ends at once with nothing in it (some servers do this for a stale
                    # resourceVersion instead of 410, kubernetes/kubernetes#104171) would otherwise
                    # loop as fast as the server answers.
                    failures += 1
                    self._failed(res, None, "watch ended immediately without events")
                else:
                    failures = 0
                    continue
            if failures >= self.relist_after_failures:
                need_list = True
            self._sleep(failures)

    def _sleep(self, failures: int) -> None:
        delay = min(self.max_backoff_s, self.resync_backoff_s * 2 ** max(0, failures - 1))
        # Jitter so that many kso replicas (or the two threads) do not retry in lockstep.
        self._stop.wait(delay * (0.5 + random.random() / 2))

    def _failed(self, res: Reflector, exc: BaseException | None, message: str) -> None:
        text = f"{res.kind}: {message}"
        with self._counter_lock:
            self.errors += 1
            self.last_error = text
        log.warning("kube watcher %s (retrying)", text, exc_info=exc if log.isEnabledFor(logging.DEBUG) else None)

    # ---- list --------------------------------------------------------------------------------
    def _list_pages(self, res: Reflector, on_page: Callable[[list[Any]], None]) -> tuple[int, str]:
        """List ``res`` page by page, handing each page's items to ``on_page`` before the next page is asked for
        (so that a big list is never held decoded as a whole: each page is parsed, and its dicts dropped, as it
        comes). Returns (items listed, the list's resourceVersion)."""
        kwargs: dict[str, Any] = {
            "limit": self.page_size,
            "_preload_content": False,
            "_request_timeout": self.request_timeout_s,
        }
        if res.field_selector:
            kwargs["field_selector"] = res.field_selector
        count = 0
        resource_version = ""
        while True:
            resp = res.list_fn(**kwargs)
            try:
                body = orjson.loads(resp.data)
            finally:
                resp.release_conn()
            if not isinstance(body, dict):
                raise ValueError(f"list of {res.kind}: expected an object, got {type(body).__name__}")
            page = body.get("items") or []
            if not isinstance(page, list):
                raise ValueError(f"list of {res.kind}: items is not an array")
            meta = body.get("metadata") or {}
            # Every page of a continued list is the snapshot of the first one, at its resourceVersion.
            resource_version = resource_version or str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            count += len(page)
            del body  # the page's dicts live only as long as on_page needs them
            on_page(page)
            del page
            if not token:
                return count, resource_version
            if self._stop.is_set():
                raise InterruptedError("stopping")
            kwargs["_continue"] = token

    def _list(self, res: Reflector) -> None:
        started = time.monotonic()
        # Each page is parsed as it arrives (outside the state lock: parsing is most of the work, and the extender
        # reads meanwhile); the state changes only once the whole list is in, so the previous contents keep
        # serving until then, and a list that fails half-way changes nothing.
        listing: _NodeListing | _PodListing = _NodeListing(self) if res is self._nodes else _PodListing(self)
        relist = res.listed.is_set()
        self._list_begins(res)

        def on_page(items: list[Any]) -> None:
            self._listed_page(res, items, relist)  # a subclass reads the raw objects while they exist
            listing.add(items)

        count, resource_version = self._list_pages(res, on_page)
        if not resource_version:
            raise ValueError(f"list of {res.kind} has no metadata.resourceVersion to watch from")
        if isinstance(listing, _NodeListing):
            self._replace_nodes(listing)
        else:
            self._replace_pods(listing, relist=res.listed.is_set())
        res.resource_version = resource_version
        first = not res.listed.is_set()
        res.listed.set()
        if not first:
            with self._counter_lock:
                self.relists += 1
        if self.freeze_after_list:
            gc.collect(1)  # the young garbage, not the whole heap
            gc.freeze()
        if self._nodes.listed.is_set() and self._pods.listed.is_set():
            self.state.mark_synced("api")
            self._synced.set()
        log.info(
            "listed %d %s at resourceVersion %s in %.2fs",
            count,
            res.kind,
            resource_version,
            time.monotonic() - started,
        )

    def _list_begins(self, res: Reflector) -> None:
        """A list of ``res`` starts (a subclass drops what it kept of a list that failed half-way)."""

    def _listed_page(self, res: Reflector, items: list[Any], relist: bool) -> None:
        """One page of a list of ``res``, its raw objects, before they are parsed and dropped (``relist``: a list after
        the first, i.e. after a watch gap). The cache is not changed yet. For subclasses that keep more of the raw
        objects than the parsed ones hold (kso scheduler's pod clocks, the shadow's late binds)."""

    def _skip(self, kind: str, obj: Any, exc: Exception) -> None:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        name = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
        with self._counter_lock:
            self.skipped += 1
        log.warning("skipping unusable %s %s: %s", kind, name or "(unnamed)", exc)

    def _replace_nodes(self, listing: _NodeListing) -> None:
        with self.state.lock:
            for node in listing.parsed:
                self.state.upsert_node(node)
            for name in self.state.node_names():
                if name not in listing.listed:
                    self.state.remove_node(name)

    def _replace_pods(self, listing: _PodListing, relist: bool) -> None:
        with self.state.lock:
            for pod in listing.parsed:
                # After a gap (re-list), a pod that got bound meanwhile is a recent placement too.
                self._apply_pod(pod, observed_binding=relist)
            now = time.time()
            gone = (set(self.state.pods) | self._known_pods) - listing.listed
            for uid in gone:
                assumed_at = self.state.assumed.get(uid)
                if assumed_at is not None and now - assumed_at < self.assume_grace_s:
                    # kso bound it after the list's snapshot was taken; the watch will confirm it.
                    continue
                self.state.remove_pod(uid)
                self._known_pods.discard(uid)
                self.pod_memo.discard(uid)

    def _apply_pod(self, pod: PodInfo, observed_binding: bool) -> None:
        with self.state.lock:
            if not pod.node_name and not pod.terminal:
                assumed_at = self.state.assumed.get(pod.uid)
                if assumed_at is not None and time.time() - assumed_at < self.assume_grace_s:
                    # An unbound version of a pod kso just bound is older than the bind (a node name
                    # is never unset); applying it would un-count the pod until the watch catches up.
                    return
            self.state.upsert_pod(pod, observed_binding=observed_binding)
            if pod.terminal:
                self._known_pods.discard(pod.uid)
                self.pod_memo.discard(pod.uid)
            else:
                self._known_pods.add(pod.uid)

    # ---- watch -------------------------------------------------------------------------------
    def _watch(self, res: Reflector) -> int:
        """One watch request, until the server ends it; returns the number of events seen."""
        w = RawWatch()
        res.watch = w
        if self._stop.is_set():
            return 0
        kwargs: dict[str, Any] = {
            "resource_version": res.resource_version,
            "allow_watch_bookmarks": True,
            "timeout_seconds": max(1, int(self.watch_timeout_s)),
            # Read timeout past the server's own timeout: a silent connection is a dead one.
            "_request_timeout": (self.request_timeout_s, self.watch_timeout_s + self.request_timeout_s),
        }
        if res.field_selector:
            kwargs["field_selector"] = res.field_selector
        seen = 0
        try:
            for event in w.stream(res.list_fn, **kwargs):
                if self._stop.is_set():
                    break
                if not isinstance(event, dict):
                    continue  # an unparsable line; the client yields None for it
                seen += 1
                self._handle(res, event)
        finally:
            res.watch = None
        return seen

    def _handle(self, res: Reflector, event: dict[str, Any]) -> None:
        type_ = event.get("type")
        obj = event.get("raw_object")
        with self._counter_lock:
            self.events += 1
        if not isinstance(obj, dict):
            log.warning("%s watch event %s without an object; ignored", res.kind, type_)
            return
        if type_ == "ERROR":
            # The client raises for ERROR events itself; this is for a client that passes them on.
            code = obj.get("code")
            raise ApiException(status=code if isinstance(code, int) else 500, reason=str(obj.get("message")))
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        resource_version = meta.get("resourceVersion")
        if type_ in ("ADDED", "MODIFIED"):
            try:
                if res is self._nodes:
                    self.state.upsert_node(node_from_k8s(obj))
                else:
                    pod = self.pod_memo.parse(obj)
                    if pod.uid:
                        # observed_binding: a pod seen bound for the first time counts as recent.
                        self._apply_pod(pod, observed_binding=True)
                        if len(self._known_pods) > self.pod_memo.size * 4 // 5:  # the cluster grew past the list
                            self.pod_memo.reserve(len(self._known_pods) * 5 // 4)
            except ObjectError as exc:
                self._skip(res.kind[:-1], obj, exc)
        elif type_ == "DELETED":
            # By key only: a deleted object need not parse.
            if res is self._nodes:
                if isinstance(meta.get("name"), str):
                    self.state.remove_node(meta["name"])
            elif isinstance(meta.get("uid"), str):
                with self.state.lock:
                    self.state.remove_pod(meta["uid"])
                    self._known_pods.discard(meta["uid"])
                self.pod_memo.discard(meta["uid"])
        elif type_ == "BOOKMARK":
            self.state.mark_heard()  # the API server's periodic bookmark: the watch is alive, nothing changed
        else:
            log.warning("%s watch: unknown event type %r; ignored", res.kind, type_)
        if isinstance(resource_version, str) and resource_version:
            res.resource_version = resource_version


class _NodeListing:
    """The nodes of one list, parsed page by page."""

    def __init__(self, watcher: ClusterWatcher) -> None:
        self.watcher = watcher
        self.parsed: list[NodeInfo] = []
        # Names of every listed node, parsable or not: an unparsable update keeps the last good version (as the
        # watch does), it does not make the node disappear.
        self.listed: set[str] = set()

    def add(self, items: list[Any]) -> None:
        for item in items:
            meta = item.get("metadata") if isinstance(item, dict) else None
            if isinstance(meta, dict) and isinstance(meta.get("name"), str):
                self.listed.add(meta["name"])
            try:
                self.parsed.append(node_from_k8s(item))
            except ObjectError as exc:
                self.watcher._skip("node", item, exc)


class _PodListing:
    """The pods of one list, parsed page by page through the watcher's pod memo."""

    def __init__(self, watcher: ClusterWatcher) -> None:
        self.watcher = watcher
        self.parsed: list[PodInfo] = []
        self.listed: set[str] = set()  # uids of every listed pod, parsable or not
        self.count = 0

    def add(self, items: list[Any]) -> None:
        memo = self.watcher.pod_memo
        self.count += len(items)
        memo.reserve(self.count + self.count // 4)  # every pod listed so far, and room for those to come
        for item in items:
            meta = item.get("metadata") if isinstance(item, dict) else None
            if isinstance(meta, dict) and isinstance(meta.get("uid"), str):
                self.listed.add(meta["uid"])
            try:
                pod = memo.parse(item)
            except ObjectError as exc:
                self.watcher._skip("pod", item, exc)
                continue
            if pod.uid:
                self.parsed.append(pod)
