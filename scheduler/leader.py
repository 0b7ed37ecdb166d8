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

log = logging.getLogger("kso.scheduler")


class ElectionStopped(Exception):
    """Raised inside the election loop once stop() was called."""


class _StoppableLeaseLock(LeaseLock):
    def __init__(self, name: str, namespace: str, identity: str, api_client: client.ApiClient) -> None:
        super().__init__(name, namespace, identity)
        self.api_instance = client.CoordinationV1Api(api_client)
        self.stopped = threading.Event()

    def _check(self) -> None:
        if self.stopped.is_set():
            raise ElectionStopped()

    def get(self, name: str, namespace: str) -> Any:
        self._check()
        return super().get(name, namespace)

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        self._check()
        return bool(super().create(name, namespace, election_record))

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        self._check()
        return bool(super().update(name, namespace, updated_record))


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
