"""Size budgets over src/masrl, checked so that size cannot creep back (STYLE.md rule 20, issue 47).

- `train.py`, the loop a reader reads top to bottom, is at most 350 lines;
- no other module is over 450 lines, except `sandbox.py` (issue 47 leaves the isolated executor whole);
- no function is over 60 lines. A function's size is its whole text as a reader scrolls through it:
  from its first decorator (its `def` line when it has none) to its last line, docstring included.
  Methods count, and so do nested functions, each on its own and inside the function holding it;
- every import inside a function (of any package, not only masrl's) gives its reason:
  `# lazy: <reason>` on its line or in the comment lines just above it (docs/architecture.md, rule 3;
  the same convention scripts/import_graph.py reads, and its parser of it is the one used here);
- every module has its test file at the mirrored path, and that file imports it: `a/b.py` is tested
  by `tests/a/test_b.py`, a package's `a/__init__.py` by `tests/a/test_a.py`; the exceptions, modules
  with no behaviour of their own, are the table `UNTESTED` below, each with its reason.

Each size check is a pure function over a module's text and `over_budget` runs them all over a tree;
`untested_modules` pairs a tree with its tests. The last two tests print every item over budget, and
every module without its test, in the real tree in one message each.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

TRAIN_LINES = 350
MODULE_LINES = 450
FUNCTION_LINES = 60
UNLIMITED_MODULES = frozenset({"sandbox.py"})  # paths relative to the package root
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# Modules with no behaviour of their own to test (paths relative to the package root) and why. A module
# with a function that computes something belongs in the tests, not here.
UNTESTED = {
    "__init__.py": "the version string",
    "agents/__init__.py": "empty",
    "algos/__init__.py": "empty",
    "rollout/__init__.py": "empty",
    "generation/__init__.py": "a docstring naming the modules",
    "run/__init__.py": "a docstring naming the modules",
    "http/__init__.py": "re-exports",
    "retrieval/__init__.py": "re-exports",
    "pools/__init__.py": "re-exports (champ's loaded on first use)",
    "tasks/__init__.py": "re-exports and the table of built-in task names",
    "systems/__init__.py": "the table of built-in system names",
    "cli/__main__.py": "calls cli.main",
    "systems/budget/__init__.py": "the system's SystemSpec, a declaration",
    "systems/puppeteer/__init__.py": "the system's SystemSpec, a declaration",
    "systems/search/__init__.py": "the system's SystemSpec, a declaration",
    "systems/turns/__init__.py": "the system's SystemSpec, a declaration",
    "systems/turns/config.py": "its `system` section's fields, checked by pydantic alone",
    "retrieval/vocabulary.py": "word lists and page templates, data",
}


@pytest.fixture(scope="module")
def graph(load_script):
    return load_script("import_graph")


# ---------------------------------------------------------------- the checks
def module_over(name: str, text: str, limit: int) -> list[str]:
    """The module `name` if its `text` is over `limit` lines."""
    size = len(text.splitlines())
    return [f"{name}:1 module is {size} lines (budget {limit})"] if size > limit else []


def functions_over(name: str, text: str, limit: int = FUNCTION_LINES) -> list[str]:
    """Every function in `text` (methods and nested ones too) over `limit` lines, decorators and docstring included."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, FUNCTIONS):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            size = node.end_lineno - first + 1
            if size > limit:
                out.append(f"{name}:{node.lineno} function {node.name} is {size} lines (budget {limit})")
    return sorted(out, key=_by_line)


def unreasoned_imports(name: str, text: str, has_reason: Callable[[list[str], int], bool]) -> list[str]:
    """Every import inside a function in `text` without a `# lazy: <reason>` (`has_reason(lines, lineno)`)."""
    lines = text.splitlines()
    found: dict[int, str] = {}  # line -> item; an import in a nested function is named by the innermost
    for fn in ast.walk(ast.parse(text)):  # breadth first: an inner function comes after the one holding it
        if isinstance(fn, FUNCTIONS):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and not has_reason(lines, node.lineno):
                    found[node.lineno] = (f"{name}:{node.lineno} import inside {fn.name} without a "
                                          f"`# lazy: <reason>`: {lines[node.lineno - 1].strip()}")  # fmt: skip
    return [found[line] for line in sorted(found)]


def over_budget(root: Path, has_reason: Callable[[list[str], int], bool], base: Path | None = None) -> list[str]:
    """Every item over budget in the package at `root`, named by its path from `base` (default: `root`'s parent)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        name = path.relative_to(base or root.parent).as_posix()
        text = path.read_text()
        if relative == "train.py":
            out += module_over(name, text, TRAIN_LINES)
        elif relative not in UNLIMITED_MODULES:
            out += module_over(name, text, MODULE_LINES)
        out += functions_over(name, text)
        out += unreasoned_imports(name, text, has_reason)
    return out


def mirrored_test(relative: str) -> str:
    """The test file of the module at `relative` (from the package root): `a/b.py` -> `a/test_b.py`,
    a package's `a/__init__.py` -> `a/test_a.py` (named for the package), relative to `tests/`."""
    path = Path(relative)
    if path.name == "__init__.py" and path.parent != Path("."):
        return (path.parent / f"test_{path.parent.name}.py").as_posix()
    return (path.parent / f"test_{path.name}").as_posix()


def imports_module(test_text: str, module: str) -> bool:
    """Whether the test's text imports the dotted `module` itself (`import m`, `from m import x`, `from parent
    import m`); a package's submodule is not the package (`from masrl.a.b import f` does not test `masrl.a`)."""
    parent, _, name = module.rpartition(".")
    for node in ast.walk(ast.parse(test_text)):
        if isinstance(node, ast.Import) and any(a.name == module for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if node.module == module or (node.module == parent and any(a.name == name for a in node.names)):
                return True
    return False


def untested_modules(root: Path, tests: Path, untested: Mapping[str, str]) -> list[str]:
    """Every module under the package at `root` without a test file at its mirrored path under `tests`
    that imports it, and every entry of `untested` that names no module or a module that has one."""
    out = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        module = ".".join([root.name, *Path(relative).with_suffix("").parts]).removesuffix(".__init__")
        test = tests / mirrored_test(relative)
        has_test = test.exists() and imports_module(test.read_text(), module)
        if relative in untested:
            if has_test:
                out.append(f"{relative}: has its test {test.relative_to(tests.parent).as_posix()}, "
                           "so drop it from the untested table")  # fmt: skip
        elif not has_test:
            why = "does not import it" if test.exists() else "is missing"
            out.append(f"{relative}: its test {test.relative_to(tests.parent).as_posix()} {why}")
    gone = sorted(set(untested) - {p.relative_to(root).as_posix() for p in root.rglob("*.py")})
    return out + [f"{relative}: in the untested table but no such module" for relative in gone]


def _by_line(item: str) -> int:
    return int(item.split(" ", 1)[0].rsplit(":", 1)[1])


# ---------------------------------------------------------------- each check fails on a case over budget
def _function(name: str, lines: int, decorated: bool = False) -> str:
    """A function of exactly `lines` lines: its decorator, `def`, a docstring, then one statement a line."""
    head = ["@staticmethod"] if decorated else []
    head += [f"def {name}():", '    """Doc."""']
    return "\n".join(head + [f"    x{i} = {i}" for i in range(lines - len(head))]) + "\n"


def test_a_module_over_450_lines_is_named_with_its_size():
    assert module_over("pkg/ok.py", "x = 1\n" * 450, MODULE_LINES) == []
    assert module_over("pkg/big.py", "x = 1\n" * 451, MODULE_LINES) == ["pkg/big.py:1 module is 451 lines (budget 450)"]


def _indented(text: str) -> str:
    return "".join("    " + line + "\n" for line in text.splitlines())


def test_a_function_over_60_lines_is_named_with_its_line_and_size():
    text = _function("fits", 60) + _function("long", 61) + "class A:\n" + _indented(_function("method", 61, True))
    assert functions_over("pkg/m.py", text) == [
        "pkg/m.py:61 function long is 61 lines (budget 60)",
        "pkg/m.py:124 function method is 61 lines (budget 60)",  # its decorator, on line 123, counts
    ]


def test_a_nested_function_counts_in_its_own_size_and_in_its_parents():
    text = "def outer():\n" + _indented(_function("inner", 61))
    assert functions_over("m.py", text) == [
        "m.py:1 function outer is 62 lines (budget 60)",
        "m.py:2 function inner is 61 lines (budget 60)",
    ]


def test_an_import_inside_a_function_needs_a_lazy_reason(graph):
    text = (
        "import os\n"  # module level: loaded with the module, no reason needed
        "def f():\n"
        "    import json\n"  # line 3: no reason
        "    import torch  # lazy: heavy\n"
        "    # lazy: plotly is heavy, and only the page needs it\n"
        "    # (a second comment line)\n"
        "    from plotly import graph_objects\n"
        "    x = 1\n"
        "    from masrl import types\n"  # line 9: a comment above it is not just above
        "class A:\n"
        "    async def g(self):\n"
        "        from . import sibling\n"  # line 12: a relative import in a method
    )
    assert unreasoned_imports("pkg/m.py", text, graph.has_lazy_reason) == [
        "pkg/m.py:3 import inside f without a `# lazy: <reason>`: import json",
        "pkg/m.py:9 import inside f without a `# lazy: <reason>`: from masrl import types",
        "pkg/m.py:12 import inside g without a `# lazy: <reason>`: from . import sibling",
    ]


def test_the_tree_check_holds_train_to_350_and_leaves_the_sandbox_whole(graph, tmp_path):
    root = tmp_path / "masrl"
    root.mkdir()
    (root / "train.py").write_text("x = 1\n" * 351)
    (root / "sandbox.py").write_text("x = 1\n" * 900 + _function("f", 61))
    (root / "small.py").write_text("x = 1\n" * 400)
    assert over_budget(root, graph.has_lazy_reason) == [
        "masrl/sandbox.py:901 function f is 61 lines (budget 60)",
        "masrl/train.py:1 module is 351 lines (budget 350)",
    ]


def test_a_module_without_its_mirrored_test_is_named(tmp_path):
    root, tests = tmp_path / "masrl", tmp_path / "tests"
    for module in ("a/__init__.py", "a/b.py", "a/c.py", "p/__init__.py", "p/q.py", "x.py", "y.py", "types.py",
                   "gone_test.py"):  # fmt: skip
        (root / module).parent.mkdir(parents=True, exist_ok=True)
        (root / module).write_text("x = 1\n")
    (tests / "a").mkdir(parents=True)
    (tests / "a" / "test_a.py").write_text("from masrl.a import thing\n")  # the package's own test
    (tests / "a" / "test_b.py").write_text("from masrl.a import b\n")
    (tests / "a" / "test_c.py").write_text("from masrl.a.b import f\n")  # tests b, not c
    (tests / "p").mkdir()
    (tests / "p" / "test_p.py").write_text("from masrl.p.q import f\n")  # tests q, not the package
    (tests / "p" / "test_q.py").write_text("from masrl.p.q import f\n")
    (tests / "test_x.py").write_text("import masrl.x\n")
    untested = {"types.py": "data types", "y.py": "made up", "gone.py": "deleted since"}
    (tests / "test_y.py").write_text("from masrl.y import z\n")
    assert untested_modules(root, tests, untested) == [
        "a/c.py: its test tests/a/test_c.py does not import it",
        "gone_test.py: its test tests/test_gone_test.py is missing",
        "p/__init__.py: its test tests/p/test_p.py does not import it",
        "y.py: has its test tests/test_y.py, so drop it from the untested table",
        "gone.py: in the untested table but no such module",
    ]


# ---------------------------------------------------------------- the real tree
def test_src_masrl_keeps_its_budgets(graph):
    found = over_budget(graph.ROOT, graph.has_lazy_reason, base=graph.REPO)
    assert not found, f"{len(found)} items over budget (the budgets: tests/test_budgets.py):\n" + "\n".join(found)


def test_every_module_has_its_test_at_the_mirrored_path(graph):
    found = untested_modules(graph.ROOT, graph.REPO / "tests", UNTESTED)
    assert not found, f"{len(found)} modules without their mirrored test (tests/test_budgets.py):\n" + "\n".join(found)
