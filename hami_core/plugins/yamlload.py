"""The one way hami-core reads YAML files (device config, cluster and workload files): PyYAML's safe loader with
the traps of the format closed, so that a bad file fails start-up with its name, line and key instead of
hanging it or being read differently from what its author meant.

- **Duplicate keys** are an error naming both lines. PyYAML keeps the last value silently, so
  ``nvidia: {...}`` written twice would drop the first section without a word.
- **Aliases** (``*name``) are followed, but what they expand to is bounded: all the aliases of a file together
  may stand for at most ``max_alias_nodes`` nodes, each counted as the whole subtree it repeats (a "billion
  laughs" file of 1 KiB expands to 10**9 nodes; PyYAML shares them, but every consumer that walks the data, a
  validator or a JSON encoder, would hang), and an alias to a node that contains it (``&a [*a]``) is refused:
  it makes a cyclic object that no consumer can walk. The nodes written out are bounded by the file size.
- **Nesting** deeper than ``max_depth`` is refused (PyYAML recurses per level: a deep file is a crash).
- **File size** is bounded before reading (``max_bytes``), and the text must be UTF-8.
- A scalar PyYAML cannot construct (``2001-13-45`` looks like a date, a 5000-digit integer) is an error at its
  line instead of a bare ``ValueError``.

Errors are :class:`YamlInputError` (a :class:`HamiError`) whose message starts with the source; callers re-raise
them as their own error type (``ConfigError`` for device configs).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from hami_core.plugins.errors import HamiError

__all__ = ["MAX_ALIAS_NODES", "MAX_CONFIG_BYTES", "MAX_DEPTH", "MAX_INPUT_BYTES", "YamlInputError", "load_yaml",
           "load_yaml_all", "read_text"]

#: A device config comes from a ConfigMap (1 MiB at most in Kubernetes); 4 MiB leaves room for hand-written files.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: Cluster and workload files of the simulator and ``--cluster-file``. Reading takes one to three seconds a MiB
#: (libyaml's parser with PyYAML's composer and constructor: 0.36 MiB/s on a loaded 2-core machine, where PyYAML's
#: pure-Python loader managed 0.07), so this bounds start-up to minutes, not hours; larger traces belong in the
#: openb CSV format.
MAX_INPUT_BYTES = 64 * 1024 * 1024
#: Nodes (mappings, sequences, scalars) that the aliases of one file may repeat in all. Merge keys in every
#: object of a large generated file (``<<: *pod-defaults`` in 100 000 pods of 5 nodes) stay below it.
MAX_ALIAS_NODES = 1_000_000
MAX_DEPTH = 100

_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlInputError(HamiError, ValueError):
    """A YAML file cannot be read safely; the message names the source and, where known, the line."""


def _where(mark: yaml.Mark | None) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"


def _stack() -> type:
    """PyYAML's safe loading stack, its parser in C (libyaml) when PyYAML has it: parsing is most of the cost,
    and with it loading is about 5 times faster. The composer stays PyYAML's Python one either way, so that the
    bounds below see every node (``CSafeLoader`` composes in C, out of reach)."""
    if not getattr(yaml, "__with_libyaml__", False):
        return yaml.SafeLoader
    from yaml._yaml import CParser

    class _CSafe(yaml.composer.Composer, CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

    return _CSafe


class _Bounds:
    """The bounds of the module docstring, over a safe loading stack (mixed in before it). One instance reads one
    stream."""

    max_alias_nodes = MAX_ALIAS_NODES
    max_depth = MAX_DEPTH

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nodes = 0                      # nodes so far, aliases expanded
        self._repeated = 0                   # of which the aliases stand for
        self._weight: dict[str, int] = {}    # anchor -> nodes its subtree expands to
        self._open: list[str | None] = []    # anchors of the nodes being composed (ancestors of the current one)

    # --------------------------------------------------------------------------------------- composing
    def compose_document(self) -> Any:
        self._weight.clear()  # anchors are per document (PyYAML's own table is reset the same way)
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            if event.anchor in self._open:
                raise yaml.composer.ComposerError(None, None, f"alias *{event.anchor} refers to a node that "
                                                  "contains it (a self-reference)", event.start_mark)
            weight = self._weight.get(event.anchor, 1)
            self._nodes += weight
            self._repeated += weight
            if self._repeated > self.max_alias_nodes:
                raise yaml.composer.ComposerError(None, None, f"aliases expand to more than "
                                                  f"{self.max_alias_nodes:,} nodes", event.start_mark)
            return super().compose_node(parent, index)
        event = self.peek_event()
        if len(self._open) >= self.max_depth:
            raise yaml.composer.ComposerError(None, None, f"nests deeper than {self.max_depth} levels",
                                              event.start_mark)
        anchor = getattr(event, "anchor", None)
        before = self._nodes
        self._nodes += 1
        self._open.append(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._open.pop()
        if anchor is not None:
            self._weight[anchor] = self._nodes - before
        return node

    # --------------------------------------------------------------------------------------- constructing
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Mark] = {}
            for key_node, _value in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue  # "<<: *defaults": merged keys may be overridden, that is what merging is for
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    raise yaml.constructor.ConstructorError(None, None, f"a mapping key must be a scalar, got "
                                                            f"{type(key).__name__}", key_node.start_mark) from None
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {first.line + 1})", key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(None, None, f"cannot read {node.value!r:.80}: {exc}",
                                                    node.start_mark) from None


class _BoundedLoader(_Bounds, _stack()):  # type: ignore[misc]
    """What :func:`load_yaml_all` reads with: libyaml's parser when PyYAML has it."""


class _PyBoundedLoader(_Bounds, yaml.SafeLoader):
    """The same in pure Python, where PyYAML was built without libyaml (and for the tests of that case)."""


def _error(source: str, exc: yaml.YAMLError) -> YamlInputError:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if isinstance(exc, yaml.MarkedYAMLError) and problem:
        context = f" ({exc.context})" if getattr(exc, "context", None) else ""
        # Syntax errors are "not valid YAML"; the rest (duplicate keys, alias bombs) are refused valid YAML.
        syntax = "not valid YAML: " if isinstance(exc, yaml.scanner.ScannerError | yaml.parser.ParserError) else ""
        return YamlInputError(f"{source}: {syntax}{_where(mark)}: {problem}{context}")
    return YamlInputError(f"{source}: not valid YAML: {' '.join(str(exc).split())}")


def load_yaml_all(text: str, source: str, *, max_alias_nodes: int = MAX_ALIAS_NODES) -> list[Any]:
    """Every document of ``text``; raises :class:`YamlInputError` naming ``source`` and the line."""
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # the reader checks the characters here already
        loader.max_alias_nodes = max_alias_nodes
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
        return docs
    except yaml.YAMLError as exc:
        raise _error(source, exc) from None
    except RecursionError:
        raise YamlInputError(f"{source}: nests too deeply") from None
    except UnicodeEncodeError as exc:  # a str holding lone surrogates: its bytes were not UTF-8
        raise YamlInputError(f"{source}: not UTF-8 text: character {exc.start}") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(text: str, source: str, *, max_alias_nodes: int = MAX_ALIAS_NODES) -> Any:
    """The single document of ``text`` (None when empty); more than one document is an error."""
    docs = load_yaml_all(text, source, max_alias_nodes=max_alias_nodes)
    if len(docs) > 1:
        raise YamlInputError(f"{source}: holds {len(docs)} YAML documents, expected one")
    return docs[0] if docs else None


def read_text(path: str | os.PathLike[str], what: str, *, max_bytes: int) -> str:
    """The UTF-8 text of ``path`` if it is at most ``max_bytes``; errors name ``what`` (e.g. "config file") and
    the path. The size is checked on the open file, and no more than ``max_bytes + 1`` bytes are ever read
    (a FIFO or a growing file cannot make this read without end)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise YamlInputError(f"{what} {p} is {size:,} bytes, more than the {max_bytes:,}-byte limit")
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise YamlInputError(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise YamlInputError(f"{what} {p} is more than the {max_bytes:,}-byte limit")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlInputError(f"{what} {p} is not UTF-8 text: byte {exc.start} ({exc.reason})") from None
