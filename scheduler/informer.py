"""The scheduler's cache: kso's list+watch mirror (kso.core.watcher.ClusterWatcher: nodes and pods into
ClusterState, re-list on 410) plus what only a scheduler needs from the same events:

- each pod's QoS clock (timestamps and conditions, scheduler.qos.PodClock), kept beside ClusterState;
- an epoch that moves whenever room may have appeared (a node added or changed, a bound pod gone), so
  pods that fit nowhere are retried then and not on every cycle;
- the seed's periodic re-list of unscheduled pods (every 30 s), which puts back any pending pod the
  watch missed and forgets pending pods that no longer exist.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import orjson
from kubernetes import client

from kso.core.cluster import ClusterState
from kso.core.objects import ObjectError, pod_from_k8s
from kso.core.watcher import ClusterWatcher, Reflector
from scheduler.qos import PodClock, clock_from_k8s

log = logging.getLogger("kso.scheduler")

UNSCHEDULED_SELECTOR = "spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed"  # + spec.schedulerName=<name>


class SchedulerWatcher(ClusterWatcher):
    def __init__(self, state: ClusterState, api_client: client.ApiClient, *, names: tuple[str, ...] = (),
                 controller_key: str = "controller", slo_key: str = "slo", relist_s: float = 30.0, **kwargs: Any) -> None:
        super().__init__(state, api_client, **kwargs)
        self.names = names  # scheduler names whose unscheduled pods the periodic re-list fetches
        self.controller_key = controller_key
        self.slo_key = slo_key
        self.relist_s = relist_s
        self.clocks: dict[str, PodClock] = {}  # uid -> clock, every non-terminal pod
        self._listing_clocks: dict[str, PodClock] = {}  # the clocks of the pod list in progress
        self._seen_bound: dict[str, float] = {}  # uid -> when a pod without a PodScheduled time was first seen bound
        self.clock_lock = threading.Lock()
        self.epoch = 0  # moves when room may have appeared (see the module docstring)
        self.unscheduled_relists = 0
        self._core = client.CoreV1Api(api_client)
        self._relister: threading.Thread | None = None

    # ---- hooks into the reflector's events ------------------------------------------------------
    def _clock(self, obj: dict[str, Any]) -> PodClock:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid") or ""
        seen = self._seen_bound.get(uid)
        if seen is None and (obj.get("spec") or {}).get("nodeName"):
            seen = self._seen_bound[uid] = time.time()
        return clock_from_k8s(obj, self.controller_key, self.slo_key, seen if seen is not None else float("nan"))

    def _forget(self, uid: str) -> None:
        self.clocks.pop(uid, None)
        self._seen_bound.pop(uid, None)

    def _handle(self, res: Reflector, event: dict[str, Any]) -> None:
        obj = event.get("raw_object")
        kind = event.get("type")
        if isinstance(obj, dict) and kind in ("ADDED", "MODIFIED", "DELETED"):
            if res is self._pods:
                meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
                uid = meta.get("uid")
                phase = (obj.get("status") or {}).get("phase")
                with self.clock_lock:
                    if isinstance(uid, str) and uid:
                        if kind == "DELETED" or phase in ("Succeeded", "Failed"):
                            self._forget(uid)
                            if (obj.get("spec") or {}).get("nodeName"):
                                self.epoch += 1  # a bound pod left: its room is free
                        else:
                            self.clocks[uid] = self._clock(obj)
            else:
                self.epoch += 1
        super()._handle(res, event)

    def _list_begins(self, res: Reflector) -> None:
        if res is self._pods:
            self._listing_clocks = {}

    def _listed_page(self, res: Reflector, items: list[Any], relist: bool) -> None:
        if res is not self._pods:
            return
        for item in items:  # the clocks of a list in progress, from each page's raw pods (conditions' times)
            if isinstance(item, dict):
                uid = (item.get("metadata") or {}).get("uid")
                if isinstance(uid, str) and uid:
                    self._listing_clocks[uid] = self._clock(item)

    def _replace_pods(self, listing: Any, relist: bool) -> None:
        with self.clock_lock:
            clocks, self._listing_clocks = self._listing_clocks, {}
            for uid in set(self._seen_bound) - set(clocks):
                self._seen_bound.pop(uid, None)
            self.clocks = clocks
            self.epoch += 1
        super()._replace_pods(listing, relist)

    def _replace_nodes(self, listing: Any) -> None:
        super()._replace_nodes(listing)
        self.epoch += 1

    def clock(self, uid: str) -> PodClock | None:
        with self.clock_lock:
            return self.clocks.get(uid)

    def all_clocks(self) -> list[PodClock]:
        with self.clock_lock:
            return list(self.clocks.values())

    # ---- the seed's 30 s re-list of unscheduled pods ---------------------------------------------
    def start(self) -> None:
        super().start()
        if self._relister is None and self.relist_s > 0:
            self._relister = threading.Thread(target=self._relist_loop, name="kso-scheduler-relist", daemon=True)
            self._relister.start()

    def _relist_loop(self) -> None:
        while not self._stop.wait(self.relist_s):
            try:
                self.relist_unscheduled()
            except Exception as exc:  # noqa: BLE001 - the watch keeps serving; the next round retries
                log.warning("re-list of unscheduled pods failed: %s", exc)

    def relist_unscheduled(self) -> int:
        """List pods without a node; add those the cache lacks, drop pending ones the list no longer has
        (created before the list, so not a watch event racing it). Returns how many were added."""
        started = time.time()
        items: list[Any] = []
        for name in self.names:
            resp = self._core.list_pod_for_all_namespaces(field_selector=f"{UNSCHEDULED_SELECTOR},spec.schedulerName={name}",
                                                          _preload_content=False, _request_timeout=self.request_timeout_s)
            try:
                body = orjson.loads(resp.data)
            finally:
                resp.release_conn()
            page = body.get("items") if isinstance(body, dict) else None
            if not isinstance(page, list):
                raise ValueError("list of unscheduled pods: no items array")
            items += page
        listed: set[str] = set()
        added = 0
        for item in items:
            try:
                pod = pod_from_k8s(item)
            except ObjectError as exc:
                self._skip("pod", item, exc)
                continue
            listed.add(pod.uid)
            with self.state.lock:
                known = self.state.pending_pod(pod.uid) is not None
                if not known and pod.uid not in self.state.assumed:
                    self.state.upsert_pod(pod)
                    added += 1
            with self.clock_lock:
                self.clocks.setdefault(pod.uid, self._clock(item))
        for pod in self.state.pending_pods():
            clock = self.clock(pod.uid)
            if (pod.scheduler_name in self.names and pod.uid not in listed and clock is not None
                    and clock.created < started - 1.0):
                self.state.remove_pod(pod.uid)
        self.unscheduled_relists += 1
        if added:
            log.info("re-list of unscheduled pods found %d the watch had not delivered", added)
        return added
