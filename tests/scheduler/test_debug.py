"""scheduler.debug: the debug address as ``host:port``, ``:port`` or ``port``, and a clear error for a bad one
(the server itself is exercised on the control plane: tests/scheduler/test_cli_on_control_plane.py)."""

from __future__ import annotations

import pytest

from scheduler.debug import parse_address


@pytest.mark.parametrize(("address", "expected"), [
    ("127.0.0.1:10000", ("127.0.0.1", 10000)), (":9000", ("127.0.0.1", 9000)), ("9000", ("127.0.0.1", 9000)),
    ("[::1]:8080", ("::1", 8080)), ("0.0.0.0:0", ("0.0.0.0", 0)), ("localhost:", ("localhost", 10000)),
])
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize(("address", "message"), [
    ("host:http", "port 'http' is not a number"), ("127.0.0.1:70000", "port out of range"), ("x", "is not a number"),
])
def test_a_bad_address_says_what_is_wrong(address: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_address(address)
