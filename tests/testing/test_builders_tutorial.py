"""The builders example of docs/plugin-authoring.md (``tests/test_fit.py``) runs and passes, as printed.

The example is not a file of examples/hami-example-vendor, so this module takes it from the page, executes it as a
module named ``builders_tutorial`` and collects its ``test_*`` functions: a change to the kit that breaks the
example breaks this test, and an edit to the page that breaks the example does too.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TUTORIAL = ROOT / "docs" / "plugin-authoring.md"
#: The line that introduces the example; its code block follows it.
INTRO = "`tests/test_fit.py` (not part of the example package"


def tutorial_source() -> str:
    text = TUTORIAL.read_text(encoding="utf-8")
    start = text.index("```python\n", text.index(INTRO)) + len("```python\n")
    return text[start:text.index("\n```", start)]


def tutorial_module() -> types.ModuleType:
    module = types.ModuleType("builders_tutorial")
    module.__file__ = str(TUTORIAL)
    exec(compile(tutorial_source(), str(TUTORIAL), "exec"), module.__dict__)
    return module


_MODULE = tutorial_module()
_TESTS: dict[str, Callable[[], None]] = {name: getattr(_MODULE, name) for name in vars(_MODULE)
                                        if name.startswith("test_")}


def test_the_example_has_tests_and_uses_the_builders() -> None:
    assert len(_TESTS) >= 4
    source = tutorial_source()
    for name in ("fit_one", "chosen", "usage", "request", "running_pod", "engine_with", "Clock", "requesting"):
        assert f"{name}(" in source, f"the tutorial's example does not show {name}"


@pytest.mark.parametrize("name", sorted(_TESTS))
def test_tutorial_example(name: str) -> None:
    _TESTS[name]()
