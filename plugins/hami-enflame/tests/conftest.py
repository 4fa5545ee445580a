"""Shared setup for the hami-enflame tests.

The helper functions live in ``enflame_testlib`` next to this file (pytest runs with
``--import-mode=importlib``, where test modules cannot import a conftest); this conftest puts the folder
on ``sys.path``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
