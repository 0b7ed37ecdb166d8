"""kso.core.objects: Pod parsing (pod_from_k8s) and PodMemo, a pod parsed once per uid, resourceVersion and parsed
fields (and once per shared object)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kso.core.objects import ObjectError, PodMemo, pod_from_k8s
from tests.support.fixtures import make_pod


def test_null_container_is_an_empty_container() -> None:
    # Go decodes null into a zero Container; kso used to crash on it (an internal error, found by the fuzz test).
    pod = make_pod("p", cpu="250m", memory="64Mi")
    pod["spec"]["containers"] = [None, *pod["spec"]["containers"]]
    info = pod_from_k8s(pod)
    assert info.requests["cpu"] == 250.0
    assert info.raw_images == ("docker.io/library/busybox:1.36",)
    pod["spec"]["containers"] = ["nope"]
    with pytest.raises(Exception, match=r"Pod.spec.containers\[0\] must be an object"):
        pod_from_k8s(pod)


def pod(rv: str = "7", **kw: Any) -> dict[str, Any]:
    p = make_pod("web-1", uid="u-1", **kw)
    p["metadata"]["resourceVersion"] = rv
    return p


def test_same_pod_is_parsed_once_and_equals_a_parse() -> None:
    memo = PodMemo()
    first = memo.parse(pod())
    assert memo.parse(pod()) is first
    assert first == pod_from_k8s(pod())
    # Fields pod_from_k8s does not read (the watch's managedFields, labels) do not matter.
    watched = pod()
    watched["metadata"]["managedFields"] = [{"manager": "kube-scheduler"}]
    watched["metadata"]["labels"] = {"app": "web"}
    assert memo.parse(watched) is first


def test_a_changed_or_malformed_pod_at_the_same_resource_version_is_parsed_again() -> None:
    memo = PodMemo()
    memo.parse(pod())
    bigger = memo.parse(pod(cpu="2"))
    assert bigger.requests["cpu"] == 2000.0
    bad = pod()
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "-1"
    with pytest.raises(ObjectError, match="negative"):
        memo.parse(bad)
    # true is not 1 (Python's == says it is): the encoding of the fields tells them apart.
    one, true = pod(), pod()
    one["spec"]["priority"], true["spec"]["priority"] = 1, True
    assert memo.parse(one).priority == 1
    with pytest.raises(ObjectError, match="priority"):
        memo.parse(true)


def test_a_new_resource_version_or_node_with_the_same_fields_is_the_same_parse() -> None:
    """The watch's bind event and a status update change the resourceVersion (and the bind spec.nodeName) but no
    other field a parse reads: the memo answers with what a parse gives, on the object's node."""
    memo = PodMemo()
    first = memo.parse(pod("7"))
    assert memo.parse(pod("8")) is first
    bound = pod("9")
    bound["spec"]["nodeName"] = "n1"
    on_n1 = memo.parse(bound)
    assert on_n1 == pod_from_k8s(bound) and on_n1.node_name == "n1" and first.node_name == ""
    assert memo.parse(bound) is on_n1
    moved = pod("10")
    moved["spec"]["nodeName"] = "n2"
    assert memo.parse(moved) == pod_from_k8s(moved)
    unbound = pod("11")
    unbound["spec"]["nodeName"] = None
    assert memo.parse(unbound) == pod_from_k8s(unbound) == first
    assert len(memo) == 1


def test_a_bad_node_name_is_refused_not_remembered() -> None:
    memo = PodMemo()
    memo.parse(pod())
    bad = pod("8")
    bad["spec"]["nodeName"] = 7
    with pytest.raises(ObjectError):
        memo.parse(bad)


def test_a_pod_without_uid_is_parsed_every_time() -> None:
    memo = PodMemo()
    no_uid = copy.deepcopy(pod())
    del no_uid["metadata"]["uid"]
    assert memo.parse(no_uid) is not memo.parse(no_uid)
    assert len(memo) == 0
    with pytest.raises(ObjectError):
        memo.parse({"metadata": "x"})


def test_discard_forgets_a_pod() -> None:
    memo = PodMemo()
    first = memo.parse(pod())
    memo.discard("u-1")
    memo.discard("never-seen")
    assert "u-1" not in memo and memo.parse(pod()) is not first


def test_bounded_least_recently_used_first_out() -> None:
    memo = PodMemo(size=2)
    pods = [make_pod(f"p{i}", uid=f"u{i}") for i in range(3)]
    for p in pods:
        p["metadata"]["resourceVersion"] = "1"
    a = memo.parse(pods[0])
    memo.parse(pods[1])
    assert memo.parse(pods[0]) is a  # used: now the most recent
    memo.parse(pods[2])  # evicts p1
    assert len(memo) == 2
    assert memo.parse(pods[0]) is a


def test_reserve_makes_room_and_never_shrinks() -> None:
    memo = PodMemo(size=2)
    memo.reserve(1)
    assert memo.size == 2
    memo.reserve(3)
    pods = [make_pod(f"p{i}", uid=f"u{i}") for i in range(3)]
    first = [memo.parse(p) for p in pods]
    assert len(memo) == 3 and all(memo.parse(p) is f for p, f in zip(pods, first, strict=True))
