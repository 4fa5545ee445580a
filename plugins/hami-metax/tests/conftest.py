"""Shared fixtures for the hami-metax tests.

The helper functions live in ``metax_testlib`` next to this file (pytest runs with
``--import-mode=importlib``, where test modules cannot import a conftest); this conftest puts the folder
on ``sys.path`` and offers the fixtures.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from metax_testlib import T0, Clock


@pytest.fixture
def clock() -> Clock:
    """A fake engine clock at :data:`T0`; advance it with ``clock.now += seconds``."""
    return Clock(T0)
