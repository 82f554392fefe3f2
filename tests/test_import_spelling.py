"""Test files import what tests/ shares by its plain name (``from helpers import perturbed``,
``from conftest import tiny_overrides``, a sibling test module as ``from test_grid_runner import cli``):
conftest.py puts tests/ on ``sys.path`` and pytest a test file's own folder. ``tests`` is no package (no
``__init__.py``), so ``from tests.helpers import ...`` or a relative import would load a second copy of
the module under another name, and works only from the repository root."""
import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent


def package_style_imports(source: str) -> list[str]:
    """``line: module`` of each import in ``source`` that names tests/ as a package (``tests``,
    ``tests.<anything>``, or a relative import), anywhere in the file (also inside functions), and of
    each ``importlib.import_module`` / ``__import__`` call with such a literal name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ast.unparse(node.func) in ("importlib.import_module", "import_module", "__import__")):
            names = [node.args[0].value]
        found += [(node.lineno, name) for name in names if name == "tests" or name.startswith(("tests.", "."))]
    return [f"{line}: {name}" for line, name in sorted(found)]


def test_no_test_file_imports_tests_as_a_package():
    bad = {str(path.relative_to(TESTS)): hits for path in sorted(TESTS.rglob("*.py"))
           if (hits := package_style_imports(path.read_text()))}
    assert not bad, f"import these by their plain name (from helpers import ...), not as tests.*: {bad}"


def test_the_check_sees_every_spelling():
    source = "\n".join([
        "import os",
        "from helpers import perturbed",
        "from conftest import tiny_overrides",
        "from test_grid_runner import cli",
        "from tests.helpers import perturbed",        # 5
        "import tests.bad_inputs.harness as h",       # 6
        "def f():",
        "    from tests import conftest",             # 8
        "    from .helpers import perturbed",         # 9
        "    importlib.import_module('tests.helpers')",  # 10
        "    importlib.import_module('helpers')",
        "testsuite = __import__('testsuite')",
    ])
    assert package_style_imports(source) == [
        "5: tests.helpers", "6: tests.bad_inputs.harness", "8: tests", "9: .helpers", "10: tests.helpers"]
