"""Every module of the package has tests that a reader finds by its name.

A module ``edge_jax/<package path>/<name>.py`` (``__init__.py`` files aside) counts as tested when

- a test file is named for it: ``test_<name>.py`` or ``test_<name>_<more>.py`` anywhere under ``tests/`` when no
  other module of the package has the basename ``<name>``; a shared basename (``cli``, ``config``, ``docs``,
  ``bench``, ...) only in the module's own folder ``tests/<package path>/``, where a prefix may come first
  (``tests/papers/npumoe/test_moe_cli.py`` is a test of ``edge_jax/papers/npumoe/cli.py``, not of
  ``edge_jax/cli.py``); the words are whole (``test_checkpoint_*.py`` names no module ``check``); or
- a file under ``tests/`` names it by its dotted name: ``import edge_jax.a.b``, ``from edge_jax.a.b import x`` or
  ``from edge_jax.a import b`` anywhere in the file (also inside a function), ``importlib.import_module`` with that
  literal name, or a ``"edge_jax.a.b:function"`` string (how a grid names its post hook).

Exempt (:data:`EXEMPT`, each with its reason): modules whose top level is only a docstring and imports, kept for
their side effect (registering their package's modules); the check below holds them to that. :data:`NOT_YET_TESTED`
lists the modules that had no test by this rule when the check was added: it may only shrink (a listed module
that gains a test, or goes, must leave the list), so a module added later without a test fails here by name.
"""
from __future__ import annotations

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE, TESTS = ROOT / "edge_jax", ROOT / "tests"

_PLUGIN = "imports its paper's modules so that their registrations run (edge_jax.plugins.load); no code of its own"
EXEMPT = {f"edge_jax.papers.{paper}.plugin": _PLUGIN
          for paper in ("edgeinfinite", "expert_cache", "meki", "npumoe", "plm")}

NOT_YET_TESTED = {  # exercised only through other modules' tests when this check was added (issue 55)
    "edge_jax.bench.catalog", "edge_jax.bench.hf_import", "edge_jax.bench.train_step", "edge_jax.compile.loops",
    "edge_jax.data.builders.records", "edge_jax.data.pieces", "edge_jax.hf.check", "edge_jax.hf.importer",
    "edge_jax.hf.lazy_save", "edge_jax.hf.memory_tables", "edge_jax.interop.families.llama",
    "edge_jax.interop.families.phimoe", "edge_jax.interop.families.qwen2", "edge_jax.interop.families.qwen3",
    "edge_jax.interop.families.qwen3_moe", "edge_jax.interop.layouts", "edge_jax.layers.attention.kinds",
    "edge_jax.layers.moe.strategies", "edge_jax.papers.edgeinfinite.cli", "edge_jax.papers.edgeinfinite.config",
    "edge_jax.papers.expert_cache.cli", "edge_jax.papers.meki.cli", "edge_jax.papers.npumoe.capture",
    "edge_jax.papers.npumoe.evaluators", "edge_jax.papers.plm.cli", "edge_jax.papers.plm.config",
    "edge_jax.papers.plm.evaluators", "edge_jax.papers.plm.params", "edge_jax.train.qa",
    "edge_jax.utils.rendezvous", "edge_jax.utils.timing",
}


def package_modules(root: pathlib.Path = PACKAGE) -> dict[str, pathlib.Path]:
    """Dotted name -> file of every module under ``root`` but the ``__init__.py`` files."""
    return {".".join(p.relative_to(root.parent).with_suffix("").parts): p
            for p in sorted(root.rglob("*.py")) if p.name != "__init__.py"}


def dotted_names(source: str) -> set[str]:
    """The ``edge_jax`` modules (and, for ``from a import b``, the candidates ``a.b``) ``source`` names."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.add(node.args[0].value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and ":" in node.value:
            out.add(node.value.split(":")[0])
    return {name for name in out if name.startswith("edge_jax.")}


def _names_it(stem: str, name: str, prefix_allowed: bool) -> bool:
    words, want = stem.split("_")[1:], name.split("_")
    starts = range(len(words) - len(want) + 1) if prefix_allowed else range(1)
    return stem.startswith("test_") and any(words[i:i + len(want)] == want for i in starts)


def untested(modules: dict[str, pathlib.Path], test_files: list[pathlib.Path], tests_root: pathlib.Path = TESTS,
             package_root: pathlib.Path = PACKAGE) -> list[str]:
    """The modules that no test file is named for and none names (the module docstring's rule)."""
    named = set()
    for path in test_files:
        named |= dotted_names(path.read_text(encoding="utf-8"))
    shared = collections.Counter(p.stem for p in modules.values())
    out = []
    for dotted, path in modules.items():
        home = tests_root / path.parent.relative_to(package_root)
        by_name = any((t.parent == home and _names_it(t.stem, path.stem, True))
                      or (shared[path.stem] == 1 and _names_it(t.stem, path.stem, False)) for t in test_files)
        if not by_name and dotted not in named:
            out.append(dotted)
    return out


def _imports_only(path: pathlib.Path) -> bool:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return all(isinstance(n, (ast.Import, ast.ImportFrom)) or (isinstance(n, ast.Expr) and isinstance(
        n.value, ast.Constant) and isinstance(n.value.value, str)) for n in body)


def test_every_module_has_a_test():
    modules = package_modules()
    missing = untested(modules, sorted(TESTS.rglob("*.py")))
    new = sorted(set(missing) - NOT_YET_TESTED - set(EXEMPT))
    assert not new, (f"no test names these modules: {new}; add tests/<package path>/test_<module>.py (or import the "
                     "module by its dotted name in a test)")
    done = sorted(NOT_YET_TESTED - set(missing))
    assert not done, f"these modules have a test now (or are gone): {done}; remove them from NOT_YET_TESTED"
    assert not NOT_YET_TESTED & set(EXEMPT)


def test_exempt_modules_only_import():
    modules = package_modules()
    for dotted, reason in EXEMPT.items():
        assert dotted in modules, f"{dotted} is exempt but gone; remove it from EXEMPT"
        assert reason and _imports_only(modules[dotted]), f"{dotted} has code of its own now: give it a test"


def test_the_rule_on_a_made_up_tree(tmp_path):
    pkg, tests = tmp_path / "edge_jax", tmp_path / "tests"
    files = {"edge_jax/a/cli.py": "", "edge_jax/b/cli.py": "", "edge_jax/a/solo.py": "", "edge_jax/a/check.py": "",
             "edge_jax/b/by_import.py": "", "edge_jax/b/by_hook.py": "", "edge_jax/b/lazy.py": "",
             "edge_jax/b/from_pkg.py": "", "edge_jax/b/nothing.py": "", "edge_jax/a/__init__.py": "",
             "tests/test_cli.py": "",  # names neither a/cli.py nor b/cli.py: the basename is shared
             "tests/a/test_x_cli.py": "",  # a/cli.py, in its own folder, after a prefix
             "tests/other/test_solo_more.py": "",  # a/solo.py: its basename is unique
             "tests/a/test_checkpoint.py": "",  # not check.py: whole words only
             "tests/t1.py": "import edge_jax.b.by_import\nGRID = {'post': 'edge_jax.b.by_hook:write'}\n",
             "tests/t2.py": "def f():\n    importlib.import_module('edge_jax.b.lazy')\n"
                            "    from edge_jax.b import from_pkg\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    modules = package_modules(pkg)
    assert "edge_jax.a.__init__" not in modules and len(modules) == 9
    assert untested(modules, sorted(tests.rglob("*.py")), tests, pkg) == [
        "edge_jax.a.check", "edge_jax.b.cli", "edge_jax.b.nothing"]
