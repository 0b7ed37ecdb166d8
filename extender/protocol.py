"""The kube-scheduler extender wire format (k8s.io/kube-scheduler extender/v1).

The request structs carry no json tags, so kube-scheduler sends Go field names (``Pod``, ``Nodes``,
``NodeNames``); schedulers before 1.19 sent lowercase keys. Go decodes case-insensitively, so we
accept any casing of the top-level keys and always answer with the capitalised names.
Parsing is orjson plus a few type checks: no model of a whole Pod or Node is built here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from decisions.engine import InputError, names_ok


class ProtocolError(InputError):
    """A request kso cannot answer; the message says what is wrong. ``kind`` labels the metric."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on one request, checked before any work (defaults: ExtenderSettings)."""

    max_depth: int = 100
    max_nodes: int = 10_000


DEFAULT_LIMITS = Limits()

# +1 for an opening bracket, -1 for a closing one, 0 for any other byte.
_BRACKET_STEP = np.zeros(256, dtype=np.int8)
_BRACKET_STEP[[ord("{"), ord("[")]] = 1
_BRACKET_STEP[[ord("}"), ord("]")]] = -1
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"{}[]")


def _running_count(brackets: bytes) -> np.ndarray:
    """The running bracket count (+1 per opener, -1 per closer) over bytes that hold only brackets."""
    return np.cumsum(_BRACKET_STEP[np.frombuffer(brackets, dtype=np.uint8)], dtype=np.int32)


def check_depth(body: bytes, limit: int) -> None:
    """400 if ``body`` nests arrays and objects more than ``limit`` deep (orjson alone accepts 1,024 levels,
    and its encoder stops at 254, so a deep Node could not be echoed back).

    A body with at most ``limit`` opening brackets cannot be deeper (counted in C: kube-scheduler's
    NodeNames bodies have ~50, so the hot path stops here). Otherwise the running bracket count is taken
    over the body's brackets in numpy, without telling brackets inside strings apart: balanced ones (managedFields
    keys, a last-applied-configuration) only add their own depth; a string of closing brackets could hide
    depth, and the reply encoder's own limit is the backstop for that (a 400 as well, see app.py).
    """
    # bytes.translate keeps only the brackets, in C (far cheaper than a numpy pass over every byte), and
    # counting the openers in what it keeps is cheaper than two counts over the whole body
    brackets = body.translate(None, _NOT_BRACKETS)
    if brackets.count(b"{") + brackets.count(b"[") <= limit:
        return
    depth = int(_running_count(brackets).max())
    if depth > limit:
        raise ProtocolError(f"JSON nested {depth} levels deep, more than the {limit} allowed (KSO_MAX_JSON_DEPTH)",
                            "too_deep")


def too_many_nodes(count: int, what: str, limits: Limits) -> ProtocolError:
    return ProtocolError(f"{what} lists {count} nodes, more than the {limits.max_nodes} allowed per request "
                         "(KSO_MAX_NODES)", "too_many_nodes")


def loads(body: bytes, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    if not body:
        raise ProtocolError("empty request body; expected a JSON object", "malformed_json")
    check_depth(body, limits.max_depth)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"malformed JSON: {exc}", "malformed_json") from None
    if not isinstance(doc, dict):
        raise ProtocolError(f"expected a JSON object, got {type(doc).__name__}", "wrong_type")
    return doc


def _folded(doc: dict[str, Any]) -> dict[str, Any]:
    """Top-level keys folded to lower case; the exact Go name wins over other casings."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        low = key.lower()
        if low not in out or key[:1].isupper():
            out[low] = value
    return out


@dataclass(slots=True)
class ExtenderArgs:
    pod: dict[str, Any]
    nodes: list[dict[str, Any]] | None  # Nodes.items (nodeCacheCapable: false)
    node_list: dict[str, Any] | None  # the NodeList object, echoed back with the passing items
    node_names: list[str] | None  # NodeNames (nodeCacheCapable: true)
    # Each of ``nodes``' bytes as sent, when every one is exactly what orjson writes for its object (KnownNodeItems
    # checked it once per distinct bytes): filter's reply splices these instead of encoding the nodes again
    node_raw: list[bytes] | None = None


def _pod(f: dict[str, Any]) -> dict[str, Any]:
    pod = f.get("pod")
    if pod is None:
        raise ProtocolError("missing Pod", "missing_pod")
    if not isinstance(pod, dict):
        raise ProtocolError(f"Pod must be an object, got {type(pod).__name__}", "wrong_type")
    if not pod:
        raise ProtocolError("Pod is empty", "missing_pod")
    return pod


_BRACKET_RUNS: dict[bytes, tuple[int, int]] = {}  # short bracket strings seen (a body's head: its pod's shape)


def _bracket_run(data: bytes) -> tuple[int, int]:
    """(net, highest) of check_depth's running bracket count over ``data``, from 0: what a segment adds to
    the count after it and the highest the count gets inside it. Remembered by the brackets alone when they are
    few (the heads of full-Nodes bodies: pods of one shape have the same brackets), which spares numpy's calls."""
    brackets = data.translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0, 0
    got = _BRACKET_RUNS.get(brackets)
    if got is None:
        run = _running_count(brackets)
        got = int(run[-1]), max(0, int(run.max()))
        if len(brackets) <= 4096:
            if len(_BRACKET_RUNS) >= 1024:
                _BRACKET_RUNS.clear()
            _BRACKET_RUNS[brackets] = got
    return got


FOREIGN: dict[str, Any] = {}  # KnownNodeItems.decode's "decode it whole, and learn nothing"


@dataclass(slots=True)
class _KnownRun:
    """An items array's bytes (between ``"items":[`` and the tail) that were assembled from known items."""

    raw: bytes
    nodes: list[dict[str, Any]]  # the items' objects (shared, read only)
    raws: list[bytes]  # their bytes
    net: int  # what the run adds to check_depth's running count
    highest: int  # the highest the count gets inside it, from 0 (-1: no items)


@dataclass(slots=True)
class _KnownItem:
    raw: bytes  # the item exactly as sent (== orjson.dumps(node))
    node: dict[str, Any]  # its decoded object, shared by every call that sends these bytes: read only
    net: int
    highest: int


class KnownNodeItems:
    """Full-Nodes bodies (``nodeCacheCapable: false``) without decoding the Node objects again.

    kube-scheduler sends every feasible Node in every filter and prioritize call, ~1-10 KB each, in an order that
    changes from call to call, and the same bytes for a node until it changes. Decoding them took most of such a
    call. This keeps each node's bytes as last decoded; a body
    in kube-scheduler's own layout (``{"Pod":...,"Nodes":{...,"items":[...]},"NodeNames":null}``, Go's compact
    encoding) whose items are all byte-for-byte known is assembled from the pod and the list's own fields (decoded
    by orjson) and the known nodes' objects, so it gives exactly what decoding the whole body gives (an item is
    only ever matched against bytes that decoded to its object, and the running bracket count of check_depth is
    kept per segment). Anything else (another layout, an unknown or changed node, a body check_depth or orjson
    would refuse) is decoded whole, as before, and teaches the nodes it carried. Bounded: emptied before learning
    a body once past ``limit`` entries or ``max_bytes`` (never within a body, which would undo itself); a node
    whose bytes orjson would encode differently (Go's HTML escapes) is not kept. The last ``RUNS`` items arrays
    assembled (each at most ``MAX_RUN_BYTES``) are kept whole too: kube-scheduler sends the same nodes in the same
    order call after call, and a byte comparison of the array spares the walk over its items."""

    HEAD = b'{"Pod":'
    NODES = b',"Nodes":{'
    ITEMS = b'"items":['
    ITEM = b'{"metadata":{"name":"'
    TAIL = b']},"NodeNames":null}'

    # 16 MiB of kept bytes (~3x that with the decoded objects) is 16 full calls of distinct nodes at the default
    # KSO_MAX_BODY_BYTES; a churning cluster's departed nodes go when it is emptied.
    RUNS = 4  # items arrays remembered whole: kube-scheduler sends the same nodes in the same order call after call
    MAX_RUN_BYTES = 4 << 20

    def __init__(self, limit: int = 4096, max_bytes: int = 16 << 20) -> None:
        self.limit, self.max_bytes, self.size = limit, max_bytes, 0
        self.items: dict[bytes, _KnownItem] = {}
        self.runs: list[_KnownRun] = []  # most recent first
        self.foreign: set[bytes] = set()  # names whose bytes orjson does not reproduce: never kept
        self._tail_highest = _bracket_run(self.TAIL)[1]

    def _items_at(self, body: bytes) -> tuple[int, int] | None:
        """Where the pod ends and the items begin, in a body of kube-scheduler's layout (None: another)."""
        if not body.startswith(self.HEAD) or not body.endswith(self.TAIL):
            return None
        pod_end = body.find(self.NODES)
        at = body.find(self.ITEMS, pod_end + len(self.NODES)) if pod_end >= 0 else -1
        return None if at < 0 else (pod_end, at + len(self.ITEMS))

    def decode_raw(self, body: bytes, limits: Limits) -> tuple[dict[str, Any] | None, list[bytes] | None]:
        """The decoded body, or None when it is not one this can assemble (then decode it whole); FOREIGN
        when it carries a node that is never kept (decoding it whole teaches nothing). With it, when it assembled
        the body, each item's bytes (== orjson.dumps of its object)."""
        where = self._items_at(body)
        if where is None:
            return None, None
        pod_end, p = where
        start, at = pod_end + len(self.NODES), p - len(self.ITEMS)
        end = len(body) - len(self.TAIL)
        # An items array seen whole before (its bytes compared, not hashed): its objects without the walk below.
        # A run stays right whatever happens to the items since: the same bytes decode to the same objects.
        for run in self.runs:
            if len(run.raw) == end - p and body.startswith(run.raw, p):
                break
        else:
            run = self._walk(body, p, end)
            if not isinstance(run, _KnownRun):
                return run, None
            if len(run.raw) <= self.MAX_RUN_BYTES:
                self.runs = [run, *self.runs[:self.RUNS - 1]]
        # The pod and the list's own fields, decoded by orjson; any slice that is not whole JSON fails here.
        head = body[: at + len(self.ITEMS)]
        try:
            pod = KNOWN_PODS.decode(body[len(self.HEAD):pod_end])
            meta = body[start:at]
            fields = orjson.loads(b"{" + meta[:-1] + b"}") if meta.endswith(b",") else None if meta else {}
        except orjson.JSONDecodeError:
            return None, None
        if fields is None or not isinstance(fields, dict) or "items" in fields:
            return None, None
        # check_depth's running count, segment by segment (commas carry no brackets)
        level, highest = _bracket_run(head)
        if max(highest, level + run.highest, level + run.net + self._tail_highest) > limits.max_depth:
            return None, None  # decoded whole, for check_depth's own answer
        return {"Pod": pod, "Nodes": {**fields, "items": list(run.nodes)}, "NodeNames": None}, list(run.raws)

    def _walk(self, body: bytes, p: int, end: int) -> _KnownRun | dict[str, Any] | None:
        """The items array at ``body[p:end]`` as a run of known items; None (or FOREIGN) when it is not one."""
        known = self.items
        nodes: list[dict[str, Any]] = []
        found: list[_KnownItem] = []
        begin = p
        if p != end:
            while True:
                if not body.startswith(self.ITEM, p):
                    return None
                q = p + len(self.ITEM)
                e = body.find(b'"', q)
                key = body[q:e]
                item = known.get(key) if e > 0 else None
                if item is None or not body.startswith(item.raw, p):
                    return FOREIGN if key in self.foreign else None
                nodes.append(item.node)
                found.append(item)
                p += len(item.raw)
                if p == end:
                    break
                if p > end or body[p] != 0x2C:  # ","
                    return None
                p += 1
        level, highest = 0, -1
        for item in found:
            highest = max(highest, level + item.highest)
            level += item.net
        return _KnownRun(body[begin:end], nodes, [item.raw for item in found], level, highest)

    def learn(self, body: bytes, doc: dict[str, Any]) -> list[bytes] | None:
        """Keep the nodes of a body in kube-scheduler's layout that was decoded whole (``doc``), walking its
        items in order: a node is kept when orjson writes exactly the bytes it was sent as, and the walk stops at
        the first one it does not (that one is never kept: its bytes cannot be matched again). Returns each
        item's bytes when every one was kept (as decode_raw does), else None."""
        where = self._items_at(body)
        nodes = doc.get("Nodes")
        items = nodes.get("items") if isinstance(nodes, dict) else None
        if where is None or not isinstance(items, list):
            return None
        p, known = where[1], self.items
        raws: list[bytes] = []
        if len(known) >= self.limit or self.size > self.max_bytes:  # emptied between bodies, never within one
            known.clear()
            self.size = 0
        for node in items:
            meta = node.get("metadata") if isinstance(node, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            if not isinstance(name, str):
                return None
            key = name.encode()
            old = known.get(key)
            if old is None or not body.startswith(old.raw, p):
                try:
                    raw = orjson.dumps(node)
                except orjson.JSONEncodeError:
                    return None
                if not raw.startswith(self.ITEM + key + b'"') or not body.startswith(raw, p):
                    if len(self.foreign) >= self.limit:
                        self.foreign.clear()
                    self.foreign.add(key)
                    return None
                net, highest = _bracket_run(raw)
                old = known[key] = _KnownItem(raw, node, net, highest)
                self.size += len(raw)
            raws.append(old.raw)
            p += len(old.raw) + 1  # and the comma
        # the items' bytes are exactly these, comma-joined, up to the tail (so each item was decoded from its own
        # bytes, and its bytes are orjson's for it); learnt bodies are the rare ones, this join is cheap beside loads
        return raws if body[where[1]:len(body) - len(self.TAIL)] == b",".join(raws) else None

NODE_ITEMS = KnownNodeItems()


class KnownPods:
    """The Pod objects of recent bodies, by the Pod's bytes, and what a service parsed from each.

    kube-scheduler sends each pending pod to filter and then to prioritize (and again on a retry), the same bytes
    each time. A NodeNames body in its layout (``{"Pod":...,"Nodes":null,"NodeNames":[...]}``) is taken apart at
    its last ``,"Nodes":null,"NodeNames":[``: when the Pod's bytes and the names' bytes each decode whole, the
    body is exactly that object (JSON's grammar has one reading), so the names are decoded and the Pod taken
    from here when its bytes were seen before (the full-Nodes path takes its Pod from here too). Anything
    else is decoded whole, as before. A Pod object handed out here is shared by the calls that sent its bytes:
    nothing may change it in place (``holds`` tells such an object, which the decision engine's PodMemo then
    knows again by identity: the second call of a pod does not parse or even key it again).
    Bounded: emptied once past ``limit`` pods; a Pod over ``max_pod_bytes`` is not kept."""

    HEAD = b'{"Pod":'
    MID = b',"Nodes":null,"NodeNames":['
    TAIL = b"]}"

    def __init__(self, limit: int = 512, max_pod_bytes: int = 64 << 10, names_limit: int = 32,
                 max_names_bytes: int = 1 << 20) -> None:
        self.limit, self.max_pod_bytes = limit, max_pod_bytes
        self.pods: dict[bytes, Any] = {}
        self.held: dict[int, Any] = {}  # id(pod) -> pod, of the kept Pods (held, so the id is its own)
        # NodeNames arrays by their bytes: the same list object for the same bytes (read only, as the Pods), which
        self.names_limit, self.max_names_bytes = names_limit, max_names_bytes
        self.names: dict[bytes, Any] = {}
        self.checked: dict[int, Any] = {}  # id -> a kept names list of non-empty strings only (held: its id is its own)
        # check_depth's (net, highest) of kept Pod and names bytes (_bracket_run): a body of kept parts is not scanned
        self.runs: dict[bytes, tuple[int, int]] = {}

    def decode(self, raw: bytes) -> Any:
        """orjson.loads(raw), from the kept object when these bytes were decoded before (raises as loads does)."""
        pod = self.pods.get(raw)
        if pod is None:
            pod = orjson.loads(raw)
            if isinstance(pod, dict) and len(raw) <= self.max_pod_bytes:
                if len(self.pods) >= self.limit:
                    self.pods.clear()
                    self.held.clear()
                self.pods[raw] = pod
                self.held[id(pod)] = pod
        return pod

    def names_body(self, body: bytes, limits: Limits) -> dict[str, Any] | None:
        """A NodeNames body in kube-scheduler's layout, decoded (check_depth's 400 as loads gives it), or None."""
        if not body.startswith(self.HEAD) or not body.endswith(self.TAIL):
            return None
        at = body.rfind(self.MID)
        if at < 0:
            return None
        # body = HEAD + pod_raw + MID less its "[" + names_raw + "}": check_depth's running count is 1 after HEAD,
        # so its highest is 1 + the Pod's highest or 1 + the Pod's net + the names' highest ("}" only closes)
        pod_raw, names_raw = body[len(self.HEAD):at], body[at + len(self.MID) - 1:-1]
        inner = names_raw[1:-1]
        runs = self.runs
        pod_run, names_run = runs.get(pod_raw), runs.get(names_raw)
        # names with no opening bracket but the array's own (kube-scheduler's, every list new) reach depth 1 in it:
        # no scan of the body, and nothing to remember for them
        if names_run is None and b"[" not in inner and b"{" not in inner:
            names_run = (0, 1)
        if pod_run is None or names_run is None or max(1 + pod_run[1], 1 + pod_run[0] + names_run[1]) > limits.max_depth:
            check_depth(body, limits.max_depth)  # its 400, or a body with a part not kept yet
        try:
            names = self.decode_names(names_raw)
            pod = self.decode(pod_raw)
        except orjson.JSONDecodeError:
            return None
        for raw, run, kept in ((pod_raw, pod_run, self.pods), (names_raw, names_run, self.names)):
            if run is None and raw in kept:
                if len(runs) >= self.limit + self.names_limit:
                    runs.clear()
                runs[raw] = _bracket_run(raw)
        if type(names) is list and names_raw in self.names and self.checked.get(id(names)) is not names and names_ok(names):
            self.checked[id(names)] = names  # a kept list is looked at once (filter's; prioritize's is the same list)
        return {"Pod": pod, "Nodes": None, "NodeNames": names}

    def decode_names(self, raw: bytes) -> Any:
        """orjson.loads(raw), the kept list when these bytes were decoded before (raises as loads does)."""
        kept = self.names
        names = kept.get(raw)
        if names is None:
            names = orjson.loads(raw)
            if type(names) is list and len(raw) <= self.max_names_bytes and self.names_limit > 0:
                # the oldest goes, one at a time: a list is freed a few calls after its own (its strings still in
                # the caches), where emptying all of them at once freed names_limit cold lists in one call
                while len(kept) >= self.names_limit:
                    try:
                        oldest = next(iter(kept))
                    except (RuntimeError, StopIteration):  # another thread's body changed it meanwhile
                        break
                    self.checked.pop(id(kept.pop(oldest, None)), None)
                kept[raw] = names
        return names

    def checked_names(self, names: Any) -> bool:
        """Whether ``names`` is a kept list already found to hold non-empty strings only (parse_extender_args' check)."""
        return self.checked.get(id(names)) is names

    def holds(self, pod: Any) -> bool:
        """Whether ``pod`` is a Pod object kept here: shared by every call that sends its bytes, read only."""
        return self.held.get(id(pod)) is pod


KNOWN_PODS = KnownPods()


def parse_extender_args(body: bytes, limits: Limits = DEFAULT_LIMITS) -> ExtenderArgs:
    """Parse a filter / prioritize body."""
    doc, raws = NODE_ITEMS.decode_raw(body, limits)
    if doc is None:
        doc = KNOWN_PODS.names_body(body, limits)
        if doc is None:
            doc = loads(body, limits)
            raws = NODE_ITEMS.learn(body, doc)
    elif doc is FOREIGN:
        doc = loads(body, limits)
    f = _folded(doc)
    pod = _pod(f)
    node_list = f.get("nodes")
    names = f.get("nodenames")
    items: list[dict[str, Any]] | None = None
    if node_list is not None:
        if not isinstance(node_list, dict):
            raise ProtocolError(f"Nodes must be a NodeList object, got {type(node_list).__name__}", "wrong_type")
        raw_items = node_list.get("items")
        if raw_items is None:
            raw_items = []
        if not isinstance(raw_items, list):
            raise ProtocolError("Nodes.items must be an array", "wrong_type")
        if len(raw_items) > limits.max_nodes:
            raise too_many_nodes(len(raw_items), "Nodes.items", limits)
        for i, item in enumerate(raw_items):
            if not isinstance(item, dict):
                raise ProtocolError(f"Nodes.items[{i}] must be a Node object", "wrong_type")
        items = raw_items
    if names is not None:
        if not isinstance(names, list):
            raise ProtocolError(f"NodeNames must be an array of strings, got {type(names).__name__}", "wrong_type")
        if len(names) > limits.max_nodes:
            raise too_many_nodes(len(names), "NodeNames", limits)
        # Checked in C first (every item exactly a str, none empty); the loop only finds the culprit.
        if not KNOWN_PODS.checked_names(names) and not names_ok(names):
            for i, n in enumerate(names):
                if not isinstance(n, str) or not n:
                    raise ProtocolError(f"NodeNames[{i}] must be a non-empty string", "wrong_type")
    if items is None and names is None:
        raise ProtocolError("neither Nodes nor NodeNames given: nothing to filter or score", "missing_nodes")
    if raws is not None and (items is None or len(raws) != len(items)):
        raws = None
    return ExtenderArgs(pod=pod, nodes=items, node_list=node_list if items is not None else None,
                        node_names=None if items is not None else names, node_raw=raws)


@dataclass(slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def parse_binding_args(body: bytes, limits: Limits = DEFAULT_LIMITS) -> BindingArgs:
    f = _folded(loads(body, limits))
    values = {}
    for key, label, required in (("podname", "PodName", True), ("podnamespace", "PodNamespace", False),
                                 ("poduid", "PodUID", False), ("node", "Node", True)):
        v = f.get(key)
        if v is None and required:
            raise ProtocolError(f"missing {label}", "missing_field")
        if v is not None and not isinstance(v, str):
            raise ProtocolError(f"{label} must be a string, got {type(v).__name__}", "wrong_type")
        if required and not v:
            raise ProtocolError(f"{label} is empty", "missing_field")
        values[key] = v or ""
    return BindingArgs(values["podname"], values["podnamespace"] or "default", values["poduid"], values["node"])


@dataclass(slots=True)
class Victims:
    uids: list[str]  # victim pod UIDs, in order
    pods: list[dict[str, Any]] | None  # full victim Pods when sent (NodeNameToVictims)
    pdb_violations: int


@dataclass(slots=True)
class PreemptionArgs:
    pod: dict[str, Any]
    candidates: dict[str, Victims]  # node name -> victims (possibly empty, since Kubernetes 1.35)


def _victims(node: str, value: Any, meta: bool) -> Victims:
    label = "NodeNameToMetaVictims" if meta else "NodeNameToVictims"
    if value is None:
        return Victims([], None if meta else [], 0)
    if not isinstance(value, dict):
        raise ProtocolError(f"{label}[{node}] must be an object", "wrong_type")
    v = _folded(value)
    pods = v.get("pods") or []
    if not isinstance(pods, list):
        raise ProtocolError(f"{label}[{node}].Pods must be an array", "wrong_type")
    n_pdb = v.get("numpdbviolations") or 0
    if not isinstance(n_pdb, int) or isinstance(n_pdb, bool) or n_pdb < 0:
        raise ProtocolError(f"{label}[{node}].NumPDBViolations must be a non-negative integer", "wrong_type")
    uids: list[str] = []
    for i, p in enumerate(pods):
        if not isinstance(p, dict):
            raise ProtocolError(f"{label}[{node}].Pods[{i}] must be an object", "wrong_type")
        if meta:
            uid = _folded(p).get("uid")
        else:
            md = p.get("metadata")
            uid = md.get("uid") if isinstance(md, dict) else None
        if not isinstance(uid, str) or not uid:
            raise ProtocolError(f"{label}[{node}].Pods[{i}] has no UID", "wrong_type")
        uids.append(uid)
    return Victims(uids, None if meta else pods, n_pdb)


def parse_preemption_args(body: bytes, limits: Limits = DEFAULT_LIMITS) -> PreemptionArgs:
    f = _folded(loads(body, limits))
    pod = _pod(f)
    candidates: dict[str, Victims] = {}
    for key, meta in (("nodenametovictims", False), ("nodenametometavictims", True)):
        value = f.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ProtocolError(f"{'NodeNameToMetaVictims' if meta else 'NodeNameToVictims'} must be an object",
                                "wrong_type")
        if len(value) + len(candidates) > limits.max_nodes:
            raise too_many_nodes(len(value) + len(candidates), "NodeNameToVictims", limits)
        for node, victims in value.items():
            if node not in candidates:
                candidates[node] = _victims(node, victims, meta)
    return PreemptionArgs(pod, candidates)


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)
