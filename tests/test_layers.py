"""DESIGN's one-way imports, checked over the source with :mod:`ast`: every ``import``, ``from ... import`` and
``importlib.import_module("literal")``, at module level, in functions and under ``TYPE_CHECKING``, and every string
that names a module in full (a lazy export table, the built-in plugins, the ``hami`` commands: loaded by name).

The layers, lowest first; a module imports its own layer and those below, never above:

1. ``contract``: hami_core.plugins.{errors, types, hookspecs, node_context, dra} (and the root ``hami_core``, whose
   lazy ``Engine`` / ``Decision`` / ``get_plugin_manager`` count as imports of their modules)
2. ``wire``: hami_core.wire
3. ``toolkit``: the rest of hami_core.plugins (fit, helpers, health, objects, standard, relay, manager, ...)
4. ``engine``: hami_core.engine, hami_core.default_plugins, hami_core.policies
5. ``cluster``: hami_core.cluster, hami_core.cmdline (what the components' commands share), hami_core.defrag (the
   defragmenter's planner, shared by ``hami defrag`` and the simulator's ``--defrag``)
6. ``component``: hami_core.scheduler, hami_core.node, hami_core.sim, hami_core.monitor, hami_core.dra; peers that do
   not import one another
7. ``top``: hami_core.cli, hami_core.pluginreport, hami_core.explain, hami_core.devicesdoc, hami_core.testing,
   hami_core.defrag.cli

Besides: nothing up to ``engine`` imports a network or Kubernetes library; importing any hami_core.scheduler
module, or any vendor's entry-point module (the scheduler loads them all), never imports gRPC or NVML; a vendor
package (plugins/*/hami_*, examples/*/hami_*) imports of hami-core only hami_core.plugins and hami_core.wire, and
no other vendor (its node-side modules may import whatever third-party library they need); hami_core and
benchmarks/ have no import cycles; and every third-party import of hami_core is declared in pyproject.toml, in the
core dependencies or in the extra of the component that makes it.

Known violations, while other work removes them, are in :data:`ALLOWED`, each with its reason; an entry that no
longer matches a violation fails :func:`test_allow_list_is_not_stale`, so the list only shrinks.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("contract", ("hami_core", "hami_core.plugins.errors", "hami_core.plugins.types", "hami_core.plugins.hookspecs",
                  "hami_core.plugins.node_context", "hami_core.plugins.dra")),
    ("wire", ("hami_core.wire",)),
    ("toolkit", ("hami_core.plugins",)),
    ("engine", ("hami_core.engine", "hami_core.default_plugins", "hami_core.policies")),
    ("cluster", ("hami_core.cluster", "hami_core.cmdline", "hami_core.defrag")),
    ("component", ("hami_core.scheduler", "hami_core.node", "hami_core.sim", "hami_core.monitor", "hami_core.dra")),
    ("top", ("hami_core.cli", "hami_core.pluginreport", "hami_core.explain", "hami_core.devicesdoc",
             "hami_core.testing", "hami_core.defrag.cli")),
)
#: What ``hami_core/__init__.py`` exports lazily (``__getattr__``), and from where.
ROOT_LAZY = {"Engine": "hami_core.engine.facade", "Decision": "hami_core.engine.facade",
             "get_plugin_manager": "hami_core.plugins.manager"}
#: Network and Kubernetes libraries (and NVML), none of which the layers up to ``engine`` import.
NETWORK = ("kubernetes", "grpc", "google.protobuf", "aiohttp", "uvicorn", "httptools", "starlette", "fastapi",
           "requests", "urllib3", "httpx", "http.server", "http.client", "socketserver", "urllib.request", "socket",
           "ssl", "pynvml")
#: What a scheduler-only process never imports (DESIGN): gRPC and NVML.
NOT_IN_SCHEDULER = ("grpc", "google.protobuf", "pynvml")
#: The vendor toolkit: all of hami-core a vendor package may import.
VENDOR_MAY_IMPORT = ("hami_core.plugins", "hami_core.wire")
#: The extra each part of hami_core draws its third-party packages from, beyond the core dependencies; several:
#: the package must be in each (the cluster adapters serve the scheduler, the device plugin and the monitor).
EXTRAS = {"hami_core.scheduler": ("scheduler",), "hami_core.node": ("node",), "hami_core.monitor": ("monitor",),
          "hami_core.sim": ("sim",), "hami_core.cluster": ("scheduler", "node", "monitor"),
          "hami_core.testing.fake_kubelet": ("node",)}
#: DRA (issue 30): the kubelet plugin (gRPC, protobuf) runs on the node, where the device plugin does.
EXTRAS["hami_core.dra.kubelet"] = ("node",)
#: Import names whose distribution has another name.
DISTRIBUTIONS = {"yaml": "pyyaml", "grpc": "grpcio", "google": "protobuf", "prometheus_client": "prometheus-client",
                 "importlib_metadata": "importlib-metadata", "pynvml": "nvidia-ml-py"}
#: Third-party imports that need no declaration: the test kit runs inside pytest; NVML is optional at run time
#: (the monitor works without it; hami-nvidia[nvml] installs it).
UNDECLARED = {"hami_core.testing": ("pytest",), "hami_core.monitor.nvml": ("pynvml",)}

#: Known violations: (rule, file, what it imports), each with why and what removes it.
ALLOWED: frozenset[tuple[str, str, str]] = frozenset({
    # By design: the plugin manager registers the built-in plugins by module name, exactly as it loads a vendor's
    # entry point (STYLE rule 7); a plugin load, not a code dependency of the toolkit on the engine.
    ("layer", "hami_core/plugins/manager.py", "hami_core.default_plugins"),
    # The node lock is shared by the scheduler and the device plugin; it belongs below both (hami_core.cluster).
    ("layer", "hami_core/node/allocate.py", "hami_core.scheduler.nodelock"),
    # The fake kubelet moved to the test kit; this alias stays until plugins/hami-nvidia/tests import it there.
    ("layer", "hami_core/node/fake_kubelet.py", "hami_core.testing.fake_kubelet"),
    # The new score and workload hookspecs (issue 27 points 4-5) annotate with engine types under TYPE_CHECKING;
    # the contract's types belong in hami_core.plugins.types.
    ("layer", "hami_core/plugins/hookspecs.py", "hami_core.engine.scoring"),
    ("layer", "hami_core/plugins/hookspecs.py", "hami_core.engine.workload"),
    # TYPE_CHECKING back-references to Extender from the modules being split out of it (issue 27 point 3).
    ("cycle", "hami_core/scheduler/extender.py", "hami_core.scheduler.podgate"),
    # Issue 30: the webhook's DRA step (hami_core.dra.mode.DraAdmission, with the pure hami_core.dra.translate) is
    # built by the scheduler service; moving translate and mode below the components removes it.
    ("layer", "hami_core/scheduler/app.py", "hami_core.dra.mode"),
})


# --------------------------------------------------------------------------------------------- the source

@dataclass(frozen=True)
class Import:
    """One import in one file: the absolute module it names, where, and whether it runs when the file is imported
    (``lazy``: inside a function; ``typing``: under ``if TYPE_CHECKING:``)."""

    module: str
    path: str
    line: int
    lazy: bool
    typing: bool

    @property
    def at_import_time(self) -> bool:
        return not self.lazy and not self.typing


@dataclass(frozen=True)
class Violation:
    rule: str
    path: str
    line: int
    module: str
    why: str

    @property
    def key(self) -> tuple[str, str, str]:
        return self.rule, self.path, self.module

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: imports {self.module}: {self.why}"


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def sources() -> dict[str, Path]:
    """Every module of hami_core and of the vendor packages, by name."""
    found = {module_name(p, ROOT): p for p in (ROOT / "hami_core").rglob("*.py")}
    for pkg in vendor_packages():
        found.update({module_name(p, pkg.parent): p for p in pkg.rglob("*.py")})
    return found


def vendor_packages() -> list[Path]:
    return sorted(p for p in [*ROOT.glob("plugins/*/hami_*"), *ROOT.glob("examples/*/hami_*")]
                  if (p / "__init__.py").is_file())


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


class _Collector(ast.NodeVisitor):
    def __init__(self, name: str, path: Path, known: Mapping[str, Path]) -> None:
        self.name, self.path, self.known = name, path, known
        self.package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        self.lazy = self.typing = 0
        self.found: list[Import] = []

    def add(self, module: str, line: int) -> None:
        self.found.append(Import(module, rel(self.path), line, self.lazy > 0, self.typing > 0))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.lazy += 1
        self.generic_visit(node)
        self.lazy -= 1

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            self.typing += 1
            for child in node.body:
                self.visit(child)
            self.typing -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")[: len(self.package.split(".")) - (node.level - 1)]
            module = ".".join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        for alias in node.names:
            sub = f"{module}.{alias.name}"
            if sub in self.known:
                self.add(sub, node.lineno)
            elif module == "hami_core" and alias.name in ROOT_LAZY:
                self.add(ROOT_LAZY[alias.name], node.lineno)
            else:
                self.add(module, node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "import_module" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            self.add(node.args[0].value, node.lineno)
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if not isinstance(node.value, ast.Constant):  # a docstring names modules without loading them
            self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        # A module named in full in a string is one loaded by name later (a lazy export table, the built-in plugins,
        # the commands of ``hami``): a lazy import of it.
        if isinstance(node.value, str) and node.value in self.known and node.value != self.name:
            self.lazy += 1
            self.add(node.value, node.lineno)
            self.lazy -= 1


@cache
def imports_of(name: str) -> tuple[Import, ...]:
    path = sources()[name]
    collector = _Collector(name, path, sources())
    collector.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    found = collector.found
    if name == "hami_core":  # the root's lazy re-exports are its design, not a dependency of ``import hami_core``
        found = [i for i in found if not (i.lazy and i.module in ROOT_LAZY.values())]
    return tuple(found)


def internal(module: str) -> str | None:
    """The hami_core or vendor module an import name resolves to (the longest known prefix), or None."""
    known = sources()
    while module and module not in known:
        module = module.rpartition(".")[0]
    return module or None


def within(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def third_party(module: str) -> bool:
    top = module.partition(".")[0]
    return internal(module) is None and top not in sys.stdlib_module_names and top != "__future__"


def layer(module: str) -> tuple[int, str]:
    best: tuple[int, int, str] = (-1, -1, "")
    for index, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if within(module, [prefix]) and len(prefix) > best[0]:
                best = (len(prefix), index, name)
    assert best[1] >= 0, f"{module} is in no layer: add it to LAYERS"
    return best[1], best[2]


def component(module: str) -> str:
    return ".".join(module.split(".")[:2])


def hami_modules() -> list[str]:
    return sorted(m for m in sources() if within(m, ["hami_core"]))


# --------------------------------------------------------------------------------------------- the rules

def layer_violations() -> Iterator[Violation]:
    for name in hami_modules():
        mine, my_layer = layer(name)
        for imp in imports_of(name):
            target = internal(imp.module)
            if target is None or not within(target, ["hami_core"]):
                continue
            theirs, their_layer = layer(target)
            if theirs > mine:
                yield Violation("layer", imp.path, imp.line, imp.module,
                                f"{name} ({my_layer}) must not import the {their_layer} layer")
            elif theirs == mine and my_layer == "component" and component(target) != component(name):
                yield Violation("layer", imp.path, imp.line, imp.module,
                                f"{component(name)} must not import another component ({component(target)})")


def network_violations() -> Iterator[Violation]:
    engine = dict(LAYERS)["engine"]
    for name in hami_modules():
        if layer(name)[0] > layer(engine[0])[0]:
            continue
        for imp in imports_of(name):
            if internal(imp.module) is None and within(imp.module, NETWORK):
                yield Violation("network", imp.path, imp.line, imp.module,
                                f"{name} is at or below the engine, which imports no network or Kubernetes library")


def import_chain(start: str, banned: tuple[str, ...]) -> Iterator[tuple[list[str], Import]]:
    """Each banned library that importing ``start`` imports, with the chain of modules that leads to it."""
    seen = {start}
    queue: list[tuple[str, list[str]]] = [(start, [start])]
    while queue:
        name, chain = queue.pop(0)
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        for parent in parents:  # importing a.b.c runs a/__init__ and a/b/__init__ first
            if parent in sources() and parent not in seen:
                seen.add(parent)
                queue.append((parent, [*chain, parent]))
        for imp in imports_of(name):
            if not imp.at_import_time:
                continue
            if within(imp.module, banned):
                yield chain, imp
                continue
            target = internal(imp.module)
            if target is not None and target not in seen:
                seen.add(target)
                queue.append((target, [*chain, target]))


def entry_point_modules() -> list[str]:
    found = []
    for pyproject in [*ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("examples/*/pyproject.toml")]:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        found += [v.partition(":")[0] for v in project.get("entry-points", {}).get("hami.devices", {}).values()]
    return sorted(found)


def scheduler_violations() -> Iterator[Violation]:
    starts = [m for m in hami_modules() if within(m, ["hami_core.scheduler"])]
    starts += [m for m in entry_point_modules() if m in sources()]
    for start in starts:
        for chain, imp in import_chain(start, NOT_IN_SCHEDULER):
            yield Violation("scheduler", imp.path, imp.line, imp.module,
                            f"importing {start} imports it ({' -> '.join(chain)}); a scheduler never imports gRPC or "
                            "NVML: import it inside the function that needs it")


def vendor_violations() -> Iterator[Violation]:
    for pkg in vendor_packages():
        own = pkg.name
        for name in sorted(m for m in sources() if within(m, [own])):
            for imp in imports_of(name):
                top = imp.module.partition(".")[0]
                if top == "hami_core":
                    if imp.module != "hami_core" and not within(imp.module, VENDOR_MAY_IMPORT):
                        yield Violation("vendor", imp.path, imp.line, imp.module,
                                        "a vendor package imports only hami_core.plugins and hami_core.wire")
                elif top.startswith("hami_") and top != own and internal(imp.module) is not None:
                    yield Violation("vendor", imp.path, imp.line, imp.module,
                                    f"{own} must not import another vendor's package")


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def benchmark_imports() -> dict[str, list[tuple[str, int]]]:
    """benchmarks/*.py: the other benchmark modules each imports (name, line)."""
    files = {p.stem: p for p in (ROOT / "benchmarks").glob("*.py")}
    graph: dict[str, list[tuple[str, int]]] = {}
    for stem, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[stem] = [(a.name, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Import)
                       for a in n.names if a.name in files]
        graph[stem] += [(n.module, n.lineno) for n in ast.walk(tree)
                        if isinstance(n, ast.ImportFrom) and n.module in files and not n.level]
    return graph


def cycle_violations() -> Iterator[Violation]:
    edges: dict[str, dict[str, Import]] = {}
    for name in hami_modules():
        for imp in imports_of(name):
            target = internal(imp.module)
            if target is not None and target != name and within(target, ["hami_core"]):
                edges.setdefault(name, {}).setdefault(target, imp)
    for members in cycles({k: set(v) for k, v in edges.items()}):
        first = members[0]
        nxt = next(t for t in sorted(edges[first]) if t in members)
        imp = edges[first][nxt]
        yield Violation("cycle", imp.path, imp.line, nxt, f"an import circle: {' <-> '.join(members)}")
    bench = benchmark_imports()
    for members in cycles({k: {m for m, _ in v} for k, v in bench.items()}):
        first = members[0]
        nxt, line = next((m, n) for m, n in bench[first] if m in members)
        yield Violation("cycle", f"benchmarks/{first}.py", line, nxt,
                        f"an import circle: {' <-> '.join(members)}; share code through benchmarks/benchkit.py")


@cache
def declared() -> dict[str, frozenset[str]]:
    """pyproject.toml's distributions, normalised: ``""`` for the core dependencies, else by extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(requirements: Iterable[str]) -> frozenset[str]:
        return frozenset(normalise(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements)

    out = {"": names(project["dependencies"])}
    out.update({extra: names(reqs) for extra, reqs in project["optional-dependencies"].items()})
    return out


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extras_violations() -> Iterator[Violation]:
    for name in hami_modules():
        extras = next((v for k, v in sorted(EXTRAS.items(), key=lambda kv: -len(kv[0])) if within(name, [k])), ())
        exempt = next((v for k, v in UNDECLARED.items() if within(name, [k])), ())
        for imp in imports_of(name):
            top = imp.module.partition(".")[0]
            if not third_party(imp.module) or top in exempt:
                continue
            dist = normalise(DISTRIBUTIONS.get(top, top))
            for extra in extras or [""]:
                if dist not in declared()[""] | declared()[extra]:
                    yield Violation("extras", imp.path, imp.line, imp.module,
                                    f"pyproject.toml declares {dist} neither in its dependencies nor in its {extra!r} "
                                    "extra" if extra else f"pyproject.toml does not declare {dist} in its dependencies")


RULES = {"layer": layer_violations, "network": network_violations, "scheduler": scheduler_violations,
         "vendor": vendor_violations, "cycle": cycle_violations, "extras": extras_violations}


@cache
def violations(rule: str) -> tuple[Violation, ...]:
    return tuple(sorted(set(RULES[rule]()), key=lambda v: (v.path, v.line, v.module)))


# --------------------------------------------------------------------------------------------- the tests

@pytest.mark.parametrize("rule", sorted(RULES))
def test_imports_flow_one_way(rule: str) -> None:
    new = [str(v) for v in violations(rule) if v.key not in ALLOWED]
    assert not new, f"{len(new)} import(s) break the {rule!r} rule:\n" + "\n".join(new)


def test_allow_list_is_not_stale() -> None:
    current = {v.key for rule in RULES for v in violations(rule)}
    stale = sorted(ALLOWED - current)
    assert not stale, "no longer violated, remove from ALLOWED in tests/test_layers.py:\n" + "\n".join(
        f"{rule}: {path} imports {module}" for rule, path, module in stale)


def test_every_module_is_in_a_layer() -> None:
    for name in hami_modules():
        layer(name)


def test_a_violation_names_file_line_and_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks themselves: an engine module that imports the scheduler and gRPC, lazily, is caught twice."""
    bad = tmp_path / "hami_core" / "engine" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("import json\n\n\ndef f():\n    from hami_core.scheduler import app\n    import grpc\n")
    (bad.parent / "__init__.py").write_text("")
    (bad.parent.parent / "__init__.py").write_text("")
    (tmp_path / "hami_core" / "scheduler").mkdir()
    (tmp_path / "hami_core" / "scheduler" / "__init__.py").write_text("")
    (tmp_path / "hami_core" / "scheduler" / "app.py").write_text("")
    for fn in (sources, imports_of):
        fn.cache_clear()
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    try:
        assert [str(v) for v in layer_violations()] == [
            "hami_core/engine/bad.py:5: imports hami_core.scheduler.app: hami_core.engine.bad (engine) must not "
            "import the component layer"]
        assert [str(v) for v in network_violations()] == [
            "hami_core/engine/bad.py:6: imports grpc: hami_core.engine.bad is at or below the engine, which imports "
            "no network or Kubernetes library"]
    finally:
        for fn in (sources, imports_of):
            fn.cache_clear()
