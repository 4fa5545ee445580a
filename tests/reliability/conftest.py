"""Fixtures of the reliability tests: the in-test API server (tests/kubeapi/fake_apiserver.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubeapi.fake_apiserver import FakeApiServer


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        yield srv
