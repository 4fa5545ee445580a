"""Meta-tests that keep the plugin contract honest (STYLE rule 10, after datasette's test_docs.py).

Every ``hami_*`` spec must be documented in ``docs/plugin-hooks.md`` with its exact signature, that
file must be regenerated whenever a spec changes, every spec docstring must say what it returns and,
for firstresult hooks, that it stops at the first non-``None`` result; and every hook must have a
``test_hook_<hook name>`` test somewhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hami_core.plugins import hookspecs
from hami_core.plugins.docgen import HookDoc, hook_docs, render_hook_docs

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "plugin-hooks.md"
REGENERATE = "python -m hami_core.plugins.docgen > docs/plugin-hooks.md"
FIRSTRESULT_PHRASE = "Stops at the first non-``None`` result"
RETURNS_STATEMENT = re.compile(r":returns?:|Returns nothing|return values are ignored")

HOOKS = hook_docs()


def _ids(doc: HookDoc) -> str:
    return doc.name


def test_every_hami_function_in_hookspecs_is_a_spec() -> None:
    """A ``hami_*`` function without the spec marker would be silently missing from the contract."""
    functions = {name for name, value in vars(hookspecs).items()
                 if name.startswith("hami_") and callable(value)}
    assert functions == {doc.name for doc in HOOKS}
    assert HOOKS, "no hook specs found"


@pytest.mark.parametrize("doc", HOOKS, ids=_ids)
def test_hook_is_documented_with_its_exact_signature(doc: HookDoc) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert f"### {doc.name}\n" in text, f"{doc.name} has no section in {DOC.name}; run `{REGENERATE}`"
    assert doc.signature in text, f"{DOC.name} lacks `{doc.signature}`; run `{REGENERATE}`"


def test_hook_docs_are_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == render_hook_docs(), f"{DOC.name} is stale; run `{REGENERATE}`"


@pytest.mark.parametrize("doc", HOOKS, ids=_ids)
def test_hook_docstring_has_a_summary_and_a_return_statement(doc: HookDoc) -> None:
    lines = doc.docstring.splitlines()
    assert lines and lines[0].strip(), f"{doc.name} has no docstring summary line"
    assert len(lines) == 1 or not lines[1].strip(), f"{doc.name}: the summary must be one line"
    assert RETURNS_STATEMENT.search(" ".join(doc.docstring.split())), (
        f"{doc.name} must say what it returns: ':returns:', 'Returns nothing' or 'return values are ignored'")


@pytest.mark.parametrize("doc", HOOKS, ids=_ids)
def test_firstresult_is_stated_exactly_when_set(doc: HookDoc) -> None:
    says_so = FIRSTRESULT_PHRASE in " ".join(doc.docstring.split())  # the phrase may wrap
    if doc.firstresult:
        assert says_so, f"{doc.name} is firstresult: its docstring must say {FIRSTRESULT_PHRASE!r}"
    else:
        assert not says_so, f"{doc.name} is not firstresult but its docstring says {FIRSTRESULT_PHRASE!r}"


def _test_sources() -> str:
    files = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("plugins/*/tests/**/*.py")]
    return "\n".join(path.read_text(encoding="utf-8") for path in files)


def test_every_hook_has_a_test() -> None:
    sources = _test_sources()
    missing = [doc.name for doc in HOOKS
               if not re.search(rf"^\s*(?:async\s+)?def\s+test_hook_{doc.name}\b", sources, re.MULTILINE)]
    assert not missing, "hooks without a `test_hook_<hook name>` test: " + ", ".join(
        f"test_hook_{name}" for name in missing)
