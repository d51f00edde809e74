"""The package's shape: no import cycle between modules of ``superinfer/``, no source file over 400 lines,
nothing but the command line importing the benchmarks (``superinfer/bench/``), only the plugin in
``superinfer/vllm/``.

Import graph. Every ``.py`` file under ``superinfer/`` is a node named by its dotted module
(``superinfer/daemon/server.py`` -> ``superinfer.daemon.server``; a package's ``__init__.py`` is the
package itself, ``superinfer.daemon``). Every import statement anywhere in the file is an edge: top level,
lazy imports inside functions, and ``if TYPE_CHECKING:`` imports all count, because a cycle that only
works thanks to a lazy or type-only import is still a circle in the design. ``from superinfer.x import y``
is an edge to ``superinfer.x.y`` when that is a module, else to ``superinfer.x`` (``y`` is a name defined
there); relative imports are resolved against the importing module's package. Imports by string
(``importlib.import_module("superinfer.vllm")``) are not seen.

Parent packages are not implicit edges. Python does execute ``superinfer/daemon/__init__.py`` before
``superinfer.daemon.server``, but a package that re-exports its children (``superinfer/core/__init__.py``
importing ``superinfer.core.state``) would then form a "cycle" with each child that imports anything
(child -> parent -> child), and every re-exporting package would fail for no design reason. An *explicit*
``from superinfer.core import X`` written inside ``superinfer/core/`` is an edge to the package and does
count: that one really is a module importing an ``__init__`` that imports it back.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "superinfer"
MAX_LINES = 400


def module_name(path: Path, root: Path) -> str:
    """``root/superinfer/a/b.py`` -> ``superinfer.a.b``; ``root/superinfer/a/__init__.py`` -> ``superinfer.a``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` under ``root``, by dotted name."""
    return {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


def imports_of(name: str, path: Path, modules: Iterable[str], package: str = PACKAGE) -> set[str]:
    """The modules of ``package`` that the file imports anywhere in its body (see the module docstring)."""
    known = set(modules)
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]  # the package relative imports start from
    out: set[str] = set()

    def owner(dotted: str) -> str | None:
        """The longest known module that ``dotted`` names or lies in (None: outside ``package``)."""
        parts = dotted.split(".")
        while parts:
            cand = ".".join(parts)
            if cand in known:
                return cand
            parts.pop()
        return None

    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(here):
                    raise ValueError(f"{path}:{node.lineno}: relative import goes above the top package")
                base = here[:len(here) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        for t in targets:
            if t == package or t.startswith(package + "."):
                dst = owner(t)
                if dst is not None and dst != name:
                    out.add(dst)
    return out


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    files = source_files(root, package)
    return {name: imports_of(name, path, files, package) for name, path in files.items()}


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (or a self-loop), each sorted, in sorted
    order. Tarjan's algorithm, iterative (no recursion limit on deep graphs)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    nodes = sorted(set(graph) | {d for ds in graph.values() for d in ds})
    for start in nodes:
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, todo = work[-1]
            if todo:
                w = todo.pop()
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, sorted(graph.get(w, ()))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in graph.get(v, ()):
                    found.append(sorted(comp))
    return sorted(found)


def describe(comp: list[str], graph: Mapping[str, Iterable[str]]) -> str:
    """One cycle and the edges inside it, for the failure message."""
    inside = set(comp)
    edges = [f"    {a} -> {b}" for a in comp for b in sorted(graph.get(a, ())) if b in inside]
    return f"  {', '.join(comp)}\n" + "\n".join(edges)


# ---- the cycle finder itself (so the structure test can fail)


def test_cycle_finder_finds_a_cycle() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(g) == [["a", "b", "c"], ["e"]]


def test_cycle_finder_passes_an_acyclic_graph() -> None:
    g = {"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}
    assert cycles(g) == []


def test_cycle_finder_separates_two_cycles() -> None:
    g = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}}
    assert cycles(g) == [["a", "b"], ["c", "d"]]


def test_imports_resolve_lazy_type_checking_relative_and_names(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.b import thing\n")
    (pkg / "sub" / "b.py").write_text("thing = 1\n")
    (pkg / "c.py").write_text("CONST = 1\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nimport os\n"
        "if TYPE_CHECKING:\n    from pkg.c import CONST\n"
        "def f():\n    from .sub import b\n    from pkg.sub import thing\n    return b, thing\n")
    files = source_files(tmp_path, "pkg")
    assert imports_of("pkg.a", files["pkg.a"], files, "pkg") == {"pkg.c", "pkg.sub.b", "pkg.sub"}
    # a child does not implicitly import its parent package: no pkg.sub <-> pkg.sub.b cycle
    graph = import_graph(tmp_path, "pkg")
    assert cycles(graph) == []
    (pkg / "c.py").write_text("def g():\n    from pkg import a\n")
    assert cycles(import_graph(tmp_path, "pkg")) == [["pkg.a", "pkg.c"]]


# ---- the package


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = cycles(graph)
    if found:
        pytest.fail(f"{len(found)} import cycle(s) between modules of {PACKAGE}/ (lazy and TYPE_CHECKING "
                    "imports count):\n" + "\n".join(describe(c, graph) for c in found), pytrace=False)


def test_no_source_file_over_the_limit() -> None:
    long = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        with path.open("rb") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            long[str(path.relative_to(ROOT))] = n
    if long:
        pytest.fail(f"source files over {MAX_LINES} lines:\n"
                    + "\n".join(f"  {p}: {n} lines" for p, n in long.items()), pytrace=False)


#: the measurement tools behind ``superinferd bench ...`` and ``superinferd calibrate``
BENCH = f"{PACKAGE}.bench"
#: the only module outside :data:`BENCH` that may import it (the command line, which wires the subcommands)
BENCH_IMPORTERS = frozenset({f"{PACKAGE}.cli"})


def in_bench(name: str) -> bool:
    return name == BENCH or name.startswith(BENCH + ".")


def test_only_the_command_line_imports_the_benchmarks() -> None:
    """``superinfer/bench/`` holds everything behind ``superinferd bench ...`` and ``calibrate`` (one
    subpackage per subcommand). The product (daemon, core, simulator, tuner, KV engine, plugin, dashboard)
    never depends on it: a function a product command needs lives in the product package, and the bench
    imports it from there. Only ``superinfer.cli`` (and modules inside ``superinfer.bench``) may import it;
    lazy and TYPE_CHECKING imports count, as in the cycle test."""
    files = source_files(ROOT)
    bad = {name: sorted(d for d in imports_of(name, path, files) if in_bench(d))
           for name, path in files.items() if not in_bench(name) and name not in BENCH_IMPORTERS}
    bad = {name: deps for name, deps in bad.items() if deps}
    if bad:
        pytest.fail(f"modules outside {BENCH} import it (only {', '.join(sorted(BENCH_IMPORTERS))} may); move what "
                    "they need into their own package, or the importer into superinfer/bench/:\n"
                    + "\n".join(f"  {name} -> {', '.join(deps)}" for name, deps in sorted(bad.items())),
                    pytrace=False)


#: what vLLM loads: the plugin's scheduler and connector and the modules they import (``superinfer.vllm``'s
#: ``__init__`` resolves the class paths; compat checks the vLLM version)
PLUGIN_MODULES = frozenset({"__init__", "scheduler", "connector", "kvworker", "kvmeta", "ledger", "params", "tenants",
                            "stats", "stepfit", "steplog", "compat", "mirror"})


def test_vllm_holds_only_the_plugin() -> None:
    """``superinfer/vllm/`` is the folder vLLM loads (``--scheduler-cls superinfer.vllm.RotaScheduler``,
    ``kv_connector_module_path: superinfer.vllm``): it holds the plugin and nothing else. Measurement (the
    engine benchmark, calibration, the tiny test model, twin fidelity) lives in ``superinfer/bench/``. A new
    plugin module is added to :data:`PLUGIN_MODULES` on purpose; anything else belongs elsewhere."""
    folder = ROOT / PACKAGE / "vllm"
    found = {p.stem for p in folder.glob("*.py")}
    extra = sorted(found - PLUGIN_MODULES)
    subpackages = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__")
    if extra or subpackages:
        pytest.fail(f"superinfer/vllm/ holds modules outside the plugin's allow-list: {extra + subpackages}; "
                    "measurement tools belong in superinfer/bench/ (or add a plugin module to PLUGIN_MODULES)",
                    pytrace=False)
