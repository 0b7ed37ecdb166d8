"""Names and times of the capacity signal's objects: this kso's identity, its Lease's name part, Lease times."""

from __future__ import annotations

import hashlib
import os
import socket
from datetime import UTC, datetime
from typing import Any


def default_identity() -> str:
    """The host name: in a pod, the pod's name, the same after a container restart (so a restarted kso finds and
    deletes what it left)."""
    return socket.gethostname() or f"pid-{os.getpid()}"


def rfc3339_micro(t: float) -> str:
    """A Lease time (MicroTime). Never on a whole second: the client turns a created Lease's times into datetimes
    and back with isoformat, which drops a zero fraction, and the API server then refuses the MicroTime (400)."""
    when = datetime.fromtimestamp(t, UTC)
    return (when if when.microsecond else when.replace(microsecond=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_seconds(value: Any) -> float | None:
    """A Lease time (datetime from the client, or text) in epoch seconds."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=value.tzinfo or UTC).timestamp()
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None




def dns_label(text: str) -> str:
    """``text`` as a DNS label part (lower case, [a-z0-9-], at most 40 characters plus a hash when cut)."""
    clean = "".join(c if c.isalnum() or c == "-" else "-" for c in text.lower()).strip("-") or "kso"
    if len(clean) > 40:
        clean = f"{clean[:30].strip('-')}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return clean
