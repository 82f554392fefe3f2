"""The package's import graph: no cycles, imports only downward, no module too large.

Every module under ``edge_jax/`` is read with :mod:`ast`; every ``import`` / ``from ... import``
anywhere in the file counts (top level, inside functions, under ``if TYPE_CHECKING``; relative
imports resolved), and so does ``importlib.import_module("edge_jax....")`` with a literal name. A
literal ``"edge_jax.module:function"`` (a function named for a later import: what a declared benchmark
runs, :class:`edge_jax.bench.Benchmark`, or a grid's ``post``) counts for the layer order but not for
cycles: the module naming it imports nothing, and the named module may read the namer's constants
(its flags' defaults). ``from pkg import name`` is an edge to the module ``pkg.name`` when
that is a module, else to ``pkg``. The parent packages Python runs on the way (``pkg/__init__``) are not
edges: they would make every package that re-exports its submodules a cycle. The plugins the bootstrap
imports (:mod:`edge_jax.plugins`: the papers, by names held in variables) are not static imports, which
is the point of the registries.

The allowed order, lowest first; a module may import its own level and the levels below::

    core               edge_jax/__init__, config, config_ranges, distributed, errors, plugins, registry, sharding,
                       utils/*
    layers             layers/*
    models/interop     models/*, interop/*
    data/train/infer   data/*, train/*, infer/*, eval/*   (data/* may import the core only)
    grid/bench         grid/*, bench/*, compile/*, hf/*, docgen/*
    papers             papers/*     (papers/<a> may import neither papers/<b> nor edge_jax.papers;
                                     only papers/__init__ imports the papers)
    cli                cli

``data/`` sits at the data/train/infer level because train/ and infer/ read it, but it is the host-side input
pipeline and knows nothing about models or training: it may import the core only, the strictest
rule the code meets. There is no exceptions list: a module that does not fit is moved, or the
order above is changed on purpose.

``python tests/test_layering.py`` prints the package-level graph and every violation.
"""
from __future__ import annotations

import ast
import collections
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "edge_jax"
MAX_LINES = 450

LEVELS = (  # (level, top-level names under edge_jax/ that belong to it), lowest first
    ("core", ("__init__", "config", "config_ranges", "distributed", "errors", "plugins", "registry", "sharding",
              "utils")),
    ("layers", ("layers",)),
    ("models/interop", ("models", "interop")),
    ("data/train/infer", ("data", "train", "infer", "eval")),
    ("grid/bench", ("grid", "bench", "compile", "hf", "docgen")),
    ("papers", ("papers",)),
    ("cli", ("cli",)),
)
RANK = {level: i for i, (level, _) in enumerate(LEVELS)}
LEVEL_OF_TOP = {top: level for level, tops in LEVELS for top in tops}
NARROWER = {"data": ("core",)}  # a top-level package that may import only these levels (and itself)
RUNS = re.compile(r"edge_jax(\.\w+)+:\w+")  # a function named for a later import: "edge_jax.bench.data:run"


def _modules(package_dir: pathlib.Path) -> dict[str, tuple[pathlib.Path, str]]:
    """Dotted module name -> (file, the package its relative imports start from)."""
    mods = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            package = ".".join(parts)
        else:
            package = ".".join(parts[:-1])
        mods[".".join(parts)] = (path, package)
    return mods


def _resolve(name: str, mods) -> str | None:
    """The longest prefix of ``name`` that is one of our modules (None outside edge_jax)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: pathlib.Path, package: str, mods, named: bool = False) -> list[tuple[int, str]]:
    """(line, target module) for every import of an edge_jax module in ``path`` (and with ``named``,
    every ``"edge_jax.module:function"``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from pkg import sub` imports the module pkg.sub; `from pkg import name`, pkg itself
            names = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in mods else module
                     for alias in node.names]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
            names = [node.args[0].value]
        elif named and isinstance(node, ast.Constant) and isinstance(node.value, str) and RUNS.fullmatch(
                node.value):
            names = [node.value.partition(":")[0]]  # "edge_jax.module:function", imported when it runs
        else:
            continue
        for name in names:
            if name == "edge_jax" or name.startswith("edge_jax."):
                target = _resolve(name, mods)
                if target:
                    found.append((node.lineno, target))
    return found


def import_graph(package_dir: pathlib.Path = PACKAGE, named: bool = False) -> dict[str, dict[str, int]]:
    """module -> {imported module: line of its first import}, self-imports left out (with ``named``,
    the modules named by ``"edge_jax.module:function"`` too)."""
    mods = _modules(package_dir)
    graph = {}
    for module, (path, package) in mods.items():
        edges: dict[str, int] = {}
        for line, target in sorted(_imports(path, package, mods, named)):
            if target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _paper(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "papers" else None


def label(module: str) -> str:
    """The level of a module as messages name it: ``papers/<paper>`` for a paper's modules,
    ``data`` for data/* (its rule is narrower than its level's), else the level."""
    paper, top = _paper(module), _top(module)
    if paper:
        return f"papers/{paper}"
    return top if top in NARROWER else LEVEL_OF_TOP.get(top, top)


def _path(module: str, root: pathlib.Path) -> str:
    path = module.replace(".", "/")
    return f"{path}/__init__.py" if (root / path).is_dir() else f"{path}.py"


def violations(graph, root: pathlib.Path = ROOT) -> list[str]:
    """One line per import against the order:
    ``edge_jax/x.py:LINE: imports edge_jax.y (x-level -> y-level)``."""
    bad = []
    for module, edges in sorted(graph.items()):
        src_top = _top(module)
        if src_top not in LEVEL_OF_TOP:
            bad.append(f"{_path(module, root)}: top-level name {src_top!r} has no level; add it to LEVELS")
            continue
        src_level = LEVEL_OF_TOP[src_top]
        for target, line in sorted(edges.items(), key=lambda e: (e[1], e[0])):
            dst_top = _top(target)
            dst_level = LEVEL_OF_TOP.get(dst_top)
            if dst_level is None:
                continue  # reported as a source above
            if src_top in NARROWER:
                ok = dst_top == src_top or dst_level in NARROWER[src_top]
            else:
                ok = RANK[dst_level] <= RANK[src_level]
            if ok and dst_level == "papers" and src_level == "papers":
                src_paper, dst_paper = _paper(module), _paper(target)
                # a paper may import itself; only edge_jax/papers/__init__ imports the papers
                ok = src_paper == dst_paper or (src_paper is None and module == "edge_jax.papers")
            if not ok:
                bad.append(f"{_path(module, root)}:{line}: imports {target} ({label(module)} -> {label(target)})")
    return bad


def cycles(graph) -> list[tuple[list[str], list[str]]]:
    """For each strongly connected component of more than one module: one cycle through it
    (``[a, b, ..., a]``) and all its modules; sorted by the component's first module."""
    index, low, on_stack, stack, comps, counter = {}, {}, set(), [], [], [0]

    def strongconnect(v):  # Tarjan, iterative over the edge iterator to spare the recursion limit
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return [(_cycle_through(graph, comp), comp) for comp in sorted(comps)]


def _cycle_through(graph, comp: list[str]) -> list[str]:
    """The shortest cycle from the component's first module back to itself, inside the component."""
    start, members = comp[0], set(comp)
    parent = {start: None}
    queue = collections.deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph.get(v, ())):
            if w == start:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if w in members and w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle found through {comp}")


def _describe(cycle: list[str], comp: list[str]) -> str:
    more = sorted(set(comp) - set(cycle))
    return " -> ".join(cycle) + (f"   (the same cycle also runs through {', '.join(more)})" if more else "")


def test_no_import_cycles():
    found = cycles(import_graph())
    if found:
        pytest.fail(f"{len(found)} import cycle(s) between edge_jax modules:\n"
                    + "\n".join(_describe(cycle, comp) for cycle, comp in found), pytrace=False)


def test_imports_follow_the_layer_order():
    bad = violations(import_graph(named=True))
    order = " -> ".join(level for level, _ in LEVELS)
    if bad:
        pytest.fail(f"{len(bad)} import(s) against the order {order} (data/* imports the core only; "
                    f"papers/<a> never imports papers/<b>):\n" + "\n".join(bad), pytrace=False)


def test_module_size():
    big = sorted((n, str(p.relative_to(ROOT))) for p in PACKAGE.rglob("*.py")
                 if (n := len(p.read_text().splitlines())) > MAX_LINES)
    if big:
        pytest.fail(f"{len(big)} module(s) over {MAX_LINES} lines; split them by what they hold:\n"
                    + "\n".join(f"{path}: {n} lines" for n, path in reversed(big)), pytrace=False)


def test_checker_sees_every_kind_of_import(tmp_path):
    """The reader itself: lazy, TYPE_CHECKING, relative and import_module imports are all edges."""
    pkg = tmp_path / "edge_jax"
    for rel, text in {
        "__init__.py": "",
        "config.py": "def f():\n    from edge_jax.layers import attn\n",
        "layers/__init__.py": "",
        "layers/attn.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..papers.a import x\n",
        "papers/__init__.py": "from edge_jax.papers import a, b\n",
        "papers/a/__init__.py": "from . import x\n",
        "papers/a/x.py": "import importlib\nimportlib.import_module('edge_jax.papers.b.y')\n",
        "papers/b/__init__.py": "from . import z\n",
        "papers/b/y.py": "from edge_jax.config import f\nimport edge_jax.layers.attn\n",
        "layers/spec.py": "RUN = 'edge_jax.papers.b.y:run'\n",
        "papers/b/z.py": "from edge_jax import papers\n",
        "data/__init__.py": "",
        "data/io.py": "from edge_jax.layers.attn import K\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    graph = import_graph(pkg)
    bad = violations(import_graph(pkg, named=True), tmp_path)
    found = cycles(graph)
    assert graph["edge_jax.papers"] == {"edge_jax.papers.a": 1, "edge_jax.papers.b": 1}
    assert "edge_jax.papers.a.x" in graph["edge_jax.layers.attn"]
    assert "edge_jax.papers.b.y" in graph["edge_jax.papers.a.x"]
    assert graph["edge_jax.layers.spec"] == {}  # a named function is no import: no cycle runs through it
    assert "edge_jax/config.py:2: imports edge_jax.layers.attn (core -> layers)" in bad
    assert "edge_jax/layers/attn.py:3: imports edge_jax.papers.a.x (layers -> papers/a)" in bad
    assert "edge_jax/papers/a/x.py:2: imports edge_jax.papers.b.y (papers/a -> papers/b)" in bad
    assert "edge_jax/data/io.py:1: imports edge_jax.layers.attn (data -> layers)" in bad
    assert "edge_jax/layers/spec.py:1: imports edge_jax.papers.b.y (layers -> papers/b)" in bad
    assert "edge_jax/papers/b/z.py:1: imports edge_jax.papers (papers/b -> papers)" in bad
    assert not any(b.startswith("edge_jax/papers/__init__.py") for b in bad)
    assert len(bad) == 6, bad
    cycle, comp = found[0]
    assert cycle == ["edge_jax.config", "edge_jax.layers.attn", "edge_jax.papers.a.x",
                     "edge_jax.papers.b.y", "edge_jax.config"]
    assert found[1:] == [(["edge_jax.papers", "edge_jax.papers.b", "edge_jax.papers.b.z", "edge_jax.papers"],
                          ["edge_jax.papers", "edge_jax.papers.b", "edge_jax.papers.b.z"])]


def _unit(module: str) -> str:
    """The top-level package of a module (``papers/<paper>`` for a paper's)."""
    paper = _paper(module)
    return f"papers/{paper}" if paper else _top(module)


if __name__ == "__main__":
    g = import_graph()
    units = collections.defaultdict(set)
    for m, edges in g.items():
        units[_unit(m)].update(_unit(t) for t in edges if _unit(t) != _unit(m))
    for src in sorted(units, key=lambda u: (RANK.get(LEVEL_OF_TOP.get(u.split("/")[0], ""), 99), u)):
        print(f"{src:24s} -> {', '.join(sorted(units[src])) or '-'}")
    print("\ncycles:", *(_describe(c, comp) for c, comp in cycles(g)), sep="\n  ")
    print("\nviolations:", *violations(g), sep="\n  ")
