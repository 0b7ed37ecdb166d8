"""Registers the shared fixtures (tests/support/fixtures.py) for every test folder."""

pytest_plugins = ["tests.support.fixtures"]
