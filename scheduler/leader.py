"""Leader election on a Lease with the kubernetes client's own module (kubernetes.leaderelection), so two
replicas can run: the one holding the lease schedules, the other keeps its cache warm and waits.

Two things the module does not offer are added here: the lock uses the scheduler's ApiClient (the stock
LeaseLock uses the process-wide default configuration), and ``stop()`` ends the election loop (the stock
loop sleeps forever): the stopped lock raises out of it and never touches the Lease again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from kso.core.logs import FirstWarnings

log = logging.getLogger("kso.scheduler")


class ElectionStopped(Exception):
    """Raised inside the election loop once stop() was called."""


# The verbs an elector needs on its Lease: read it, take it when missing or expired, renew it.
LEASE_VERBS = ("get", "create", "update")


def lease_refusals(api_client: client.ApiClient, namespace: str, name: str) -> list[str] | None:
    """The verbs of LEASE_VERBS this identity may not use on Lease ``namespace/name``, by the API server's own
    authorizer (SelfSubjectAccessReview, which every authenticated identity may ask); None when it cannot be asked."""
    from kubernetes.client.exceptions import ApiException

    authz = client.AuthorizationV1Api(api_client)
    refused = []
    for verb in LEASE_VERBS:
        attributes = {"group": "coordination.k8s.io", "resource": "leases", "verb": verb, "namespace": namespace}
        if verb != "create":  # RBAC cannot limit create by name
            attributes["name"] = name
        try:
            review = authz.create_self_subject_access_review(
                {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                 "spec": {"resourceAttributes": attributes}}, _request_timeout=10)
        except (ApiException, OSError) as exc:
            log.warning("cannot check access to the Lease %s/%s (SelfSubjectAccessReview: %s); electing anyway",
                        namespace, name, getattr(exc, "status", exc))
            return None
        if not review.status.allowed:
            refused.append(verb)
    return refused


class _StoppableLeaseLock(LeaseLock):
    def __init__(self, name: str, namespace: str, identity: str, api_client: client.ApiClient) -> None:
        super().__init__(name, namespace, identity)
        self.api_instance = client.CoordinationV1Api(api_client)
        self.stopped = threading.Event()
        self._refused = FirstWarnings(log)  # the stock lock swallows its API errors: a 403 is said here, once

    def _check(self) -> None:
        if self.stopped.is_set():
            raise ElectionStopped()

    def _said(self, verb: str, exc: Any) -> None:
        status = getattr(exc, "status", None)
        if status == 403:
            self._refused.log((verb, status), "leader election: the API server refused to %s the Lease %s/%s (403): "
                              "this identity needs get, create and update on it (deploy/scheduler-standalone/rbac.yaml "
                              "grants kso-system/kso-standalone-scheduler: KSO_SCHEDULER_LEASE); still trying",
                              verb, self.namespace, self.name)

    def get(self, name: str, namespace: str) -> Any:
        self._check()
        ok, found = super().get(name, namespace)
        if not ok:
            self._said("get", found)
        return ok, found

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        self._check()
        return self._logged("create", lambda: super(_StoppableLeaseLock, self).create(name, namespace, election_record))

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        self._check()
        return self._logged("update", lambda: super(_StoppableLeaseLock, self).update(name, namespace, updated_record))

    def _logged(self, verb: str, call: Callable[[], Any]) -> bool:
        """The stock create/update log a failure only at the "leaderelection" logger's ERROR with the whole body
        (or not at all) and return False: a 403 is said once on kso's log here."""
        from kubernetes.client.exceptions import ApiException

        real = self.api_instance
        errors: list[ApiException] = []

        class Recording:
            def __getattr__(self, attr: str) -> Any:
                method = getattr(real, attr)

                def call_(*a: Any, **kw: Any) -> Any:
                    try:
                        return method(*a, **kw)
                    except ApiException as exc:
                        errors.append(exc)
                        raise
                return call_

        self.api_instance = Recording()
        try:
            ok = bool(call())
        finally:
            self.api_instance = real
        if not ok and errors:
            self._said(verb, errors[-1])
        return ok


class LeaderElector:
    """Runs ``lead(stop_event)`` while this replica holds the Lease ``namespace/name``; ``on_lost`` is called
    when the lease is lost (the caller should exit, as kube-scheduler does)."""

    def __init__(self, api_client: client.ApiClient, lease: str, identity: str, lead: Callable[[threading.Event], None],
                 on_lost: Callable[[], None], *, lease_duration_s: int = 15, renew_deadline_s: int = 10,
                 retry_period_s: int = 2) -> None:
        namespace, _, name = lease.partition("/")
        if not namespace or not name:
            raise ValueError(f"lease {lease!r} is not namespace/name")
        if not lease_duration_s > renew_deadline_s > 1.2 * retry_period_s:
            raise ValueError("need lease duration > renew deadline > 1.2 x retry period "
                             f"(got {lease_duration_s}, {renew_deadline_s}, {retry_period_s})")
        self.identity = identity
        self.lock = _StoppableLeaseLock(name, namespace, identity, api_client)
        self.leading = threading.Event()
        self._lead_stop = threading.Event()
        self._lead = lead
        self._on_lost = on_lost
        self.config = electionconfig.Config(self.lock, lease_duration_s, renew_deadline_s, retry_period_s,
                                            self._started, self._stopped)
        self._thread: threading.Thread | None = None

    def _started(self) -> None:
        log.info("%s holds the lease %s/%s; scheduling", self.identity, self.lock.namespace, self.lock.name)
        self.leading.set()
        self._lead(self._lead_stop)

    def _stopped(self) -> None:
        self._lead_stop.set()
        was = self.leading.is_set()
        self.leading.clear()
        if not self.lock.stopped.is_set():
            log.error("%s lost the lease %s/%s; stopping", self.identity, self.lock.namespace, self.lock.name)
            if was:
                self._on_lost()

    def _run(self) -> None:
        try:
            leaderelection.LeaderElection(self.config).run()
        except ElectionStopped:
            pass
        except Exception:  # noqa: BLE001 - the election thread reports, the caller decides
            log.exception("leader election failed")
            self._on_lost()
        finally:
            self._lead_stop.set()
            self.leading.clear()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kso-leader-election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop leading and campaigning, without releasing the Lease (it lapses, as after a crash)."""
        self.lock.stopped.set()
        self._lead_stop.set()
