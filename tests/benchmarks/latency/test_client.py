"""benchmarks.latency.client: the latency benchmark's measuring client (one request body with a fresh pod UID per
call, sent in one write) and its reply checks."""

from __future__ import annotations

import orjson
import pytest

from benchmarks.latency.client import check_reply, make_body
from benchmarks.latency.cluster import UID_PLACEHOLDER


def test_body_sends_a_fresh_uid_in_place_of_the_placeholder() -> None:
    body = make_body("/filter", {"Pod": {"metadata": {"uid": UID_PLACEHOLDER}}, "NodeNames": ["a"]}, 1)
    raw = body.head + b"0000-1" + body.tail
    assert orjson.loads(raw)["Pod"]["metadata"]["uid"] == "0000-1"
    with pytest.raises(AssertionError):
        make_body("/filter", {"a": UID_PLACEHOLDER, "b": UID_PLACEHOLDER}, 1)


def test_a_reply_kube_scheduler_would_reject_is_an_error_kind() -> None:
    assert check_reply("filter", 200, b'{"NodeNames":["a"],"FailedNodes":{},"Error":""}') is None
    assert check_reply("filter", 200, b'{"NodeNames":null,"FailedNodes":{},"Error":"boom"}') == "error_field"
    assert check_reply("prioritize", 500, b"") == "http_500"
