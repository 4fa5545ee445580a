"""Shared setup for the hami-kunlun tests: puts ``kunlun_testlib`` (next to this file) on ``sys.path``,
since pytest runs with ``--import-mode=importlib`` where test modules cannot import a conftest."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
