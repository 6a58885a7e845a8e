"""Layers that only point down (docs/architecture.md): no import cycle between masrl modules, no import
from a lower layer into a higher one, every module placed in a layer. The imports are parsed with `ast`
(absolute and relative, at module level and inside functions) by scripts/import_graph.py, which reads
the layer table from the architecture page itself, so the page and this test cannot drift apart."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def graph(load_script):
    return load_script("import_graph")


@pytest.fixture(scope="module")
def edges(graph):
    return graph.imports()


@pytest.fixture(scope="module")
def table(graph):
    return graph.layer_table()


def test_no_import_cycle_between_masrl_modules(graph, edges):
    found = graph.cycles(edges)
    assert found == [], "import cycles (each a set of modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_no_import_points_up_the_layers(graph, edges, table):
    up = graph.upward(edges, table)
    assert up == [], "imports from a lower layer into a higher one (docs/architecture.md):\n" + "\n".join(
        f"{e.source} (layer {graph.layer_of(e.source, table)}) -> {e.target} (layer {graph.layer_of(e.target, table)})"
        f", line {e.line}" for e in up
    )


def test_every_module_has_a_layer_on_the_architecture_page(graph, table):
    missing = graph.unplaced(graph.ROOT, table)
    assert missing == [], f"give these modules a row in docs/architecture.md's layer table: {missing}"


def test_the_layer_table_names_no_module_that_does_not_exist(graph, table):
    names = {m.removeprefix("masrl").removeprefix(".") or "masrl" for m in graph.modules()}
    stale = [p for p in table if p.removesuffix(".*") not in names]
    assert stale == [], f"docs/architecture.md's layer table names modules that are gone: {stale}"


def test_the_layers_run_from_0_to_the_cli(table):
    assert sorted(set(table.values())) == list(range(10))
    assert table["config"] == 0 and table["types"] == 0  # the schema and the data types at the bottom
    assert table["systems.api"] < table["registry"] < table["loading"] < table["parts"] < table["train"]
    assert table["cli"] == max(table.values())


def test_the_parser_sees_relative_and_function_level_imports(graph, tmp_path):
    """A made-up package: `from . import b` inside a function, `from .sub.c import X` and `import masrl.a`
    at module level; `from masrl.pkg import name` that is not a module points at the package."""
    root = tmp_path / "masrl"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from .sub.c import X\n\ndef f():\n    from . import b  # lazy: test\n")
    (root / "b.py").write_text("import masrl.a\nfrom masrl.sub import NAME\nimport os\n")
    (root / "sub" / "__init__.py").write_text("from .c import X\nNAME = 1\n")
    (root / "sub" / "c.py").write_text("from ..b import thing\n")
    got = {(e.source, e.target, e.in_function, e.lazy_reason) for e in graph.imports(root)}
    assert got == {
        ("masrl.a", "masrl.sub.c", False, False),
        ("masrl.a", "masrl.b", True, True),
        ("masrl.b", "masrl.a", False, False),
        ("masrl.b", "masrl.sub", False, False),
        ("masrl.sub", "masrl.sub.c", False, False),
        ("masrl.sub.c", "masrl.b", False, False),
    }
    assert graph.cycles(graph.imports(root)) == [["masrl.a", "masrl.b", "masrl.sub", "masrl.sub.c"]]
    table = {"a": 1, "b": 0, "sub.*": 2}
    assert graph.layer_of("masrl.sub.c", table) == 2 and graph.layer_of("masrl.sub", table) == 2
    assert [(e.source, e.target) for e in graph.upward(graph.imports(root), table)] == [
        ("masrl.a", "masrl.sub.c"), ("masrl.b", "masrl.a"), ("masrl.b", "masrl.sub"),
    ]  # fmt: skip


def test_every_system_module_imports_only_the_api_and_its_own_package(graph, edges):
    """docs/api.md: the papers' systems are written as a user's is, against masrl.systems.api alone."""
    past = graph.outside_api(edges)
    assert past == [], "modules under masrl/systems importing masrl past masrl.systems.api and their own package:\n" + (
        "\n".join(f"{e.source} -> {e.target}, line {e.line}" for e in past)
    )


def test_the_api_check_allows_the_api_and_a_systems_own_package_only(graph, tmp_path):
    """A made-up tree: a paper's package importing itself, the API and an engine module (also inside a
    function), a one-file system importing the API and another system, and the API and the table of
    built-in names, which may import anything."""
    root = tmp_path / "masrl"
    (root / "systems" / "paper").mkdir(parents=True)
    for name in ("__init__.py", "types.py", "systems/action.py"):
        (root / name).write_text("")
    (root / "systems" / "__init__.py").write_text("from masrl.types import X\n")
    (root / "systems" / "api.py").write_text("from masrl.types import X\n")
    (root / "systems" / "paper" / "__init__.py").write_text("from .a import A\nfrom masrl.systems.api import Y\n")
    (root / "systems" / "paper" / "a.py").write_text(
        "from masrl.systems.paper import b\nfrom masrl.types import X\n\ndef f():\n    import masrl.systems.action\n"
    )
    (root / "systems" / "paper" / "b.py").write_text("from . import a\n")
    (root / "systems" / "single.py").write_text("from masrl.systems.api import Y\nfrom masrl.systems.paper import b\n")
    paper = "masrl.systems.paper"
    assert graph.own_package(f"{paper}.a") == graph.own_package(paper) == paper
    assert graph.own_package("masrl.systems.single") == "masrl.systems.single"
    past = {(e.source, e.target, e.in_function) for e in graph.outside_api(graph.imports(root))}
    assert past == {
        ("masrl.systems.paper.a", "masrl.types", False),
        ("masrl.systems.paper.a", "masrl.systems.action", True),
        ("masrl.systems.single", "masrl.systems.paper.b", False),
    }


def test_the_summary_prints_the_numbers_the_lead_compares(graph):
    text = graph.summary()
    for line in ("modules:", "cycles", "upward imports", "function-level masrl import statements", "largest files",
                 "past the public API"):
        assert line in text
