"""masrl's import graph: cycles, upward imports, systems importing past their API, function-level imports.

    python scripts/import_graph.py                       # this checkout's src/masrl
    python scripts/import_graph.py --root OTHER/src/masrl  # another checkout, judged by this page's layers
    python scripts/import_graph.py --brief               # the numbers, the cycles and the largest files

Every `import` and `from ... import` of a masrl module is read with `ast` (absolute and
relative, at module level and inside functions); `from masrl.a import b` points at the module
`masrl.a.b` when there is one, else at `masrl.a`. The layers come from the table in
docs/architecture.md (tests/test_layers.py checks the same graph against the same table, so the
page and the test cannot drift apart). A submodule's import also runs its packages' __init__
files; those implicit edges are left out: a package that imports its own submodules is how
packages are built, not a loop.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "src" / "masrl"
ARCHITECTURE = REPO / "docs" / "architecture.md"
LAZY = "# lazy:"  # the reason an import waits inside a function (docs/architecture.md, rule 3)


class Import(NamedTuple):
    source: str  # the importing module, e.g. masrl.view
    target: str  # the imported masrl module
    line: int
    in_function: bool  # inside a function body (runs when called, not when the module loads)
    lazy_reason: bool  # a `# lazy:` comment on the line or in the comment lines just above


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under `root` (a package's __init__ is the package)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: Mapping[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".")[: len(module.split(".")) - (node.level - (1 if is_package else 0))]
            base_name = ".".join(base + ([node.module] if node.module else []))
        else:
            base_name = node.module or ""
        names = [f"{base_name}.{a.name}" if f"{base_name}.{a.name}" in known else base_name for a in node.names]
    out = []
    for name in names:
        while name and name not in known:  # `import masrl.a.b` of a name that is not a module: its module
            name = name.rpartition(".")[0]
        if name.split(".")[0] == "masrl" and name != module:
            out.append(name)
    return list(dict.fromkeys(out))


def has_lazy_reason(lines: list[str], lineno: int) -> bool:
    """A `# lazy:` comment on line `lineno` (1-based) of `lines` or in the comment lines just above it."""
    if LAZY in lines[lineno - 1]:
        return True
    k = lineno - 2
    while k >= 0 and lines[k].strip().startswith("#"):
        if LAZY in lines[k]:
            return True
        k -= 1
    return False


def _in_functions(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside a function body."""
    inside = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(n) for n in ast.walk(fn) if n is not fn)
    return inside


def imports(root: Path = ROOT) -> list[Import]:
    """Every import of a masrl module by a masrl module under `root`."""
    known = modules(root)
    out = []
    for module, path in known.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        inside = _in_functions(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node, module, path.name == "__init__.py", known):
                    out.append(Import(module, target, node.lineno, id(node) in inside, has_lazy_reason(lines, node.lineno)))
    return out


def cycles(edges: Iterable[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # recursion depth is bounded by the module count (~120)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


# ---------------------------------------------------------------- layers
def layer_table(page: Path = ARCHITECTURE) -> dict[str, int]:
    """The page's table `| layer | modules | ... |`: pattern -> layer. A pattern is a module name under
    masrl (`config`, `systems.api`) or a package and everything in it (`algos.*`)."""
    table: dict[str, int] = {}
    for row in re.findall(r"^\|\s*(\d+)\s*\|([^|]*)\|", page.read_text(), re.MULTILINE):
        for pattern in re.findall(r"`([\w.*]+)`", row[1]):
            table[pattern] = int(row[0])
    if not table:
        raise ValueError(f"{page} has no layer table (rows like | 0 | `types` `config` | ... |)")
    return table


def layer_of(module: str, table: Mapping[str, int]) -> int | None:
    """The layer of a module: its own row, else the longest package pattern that holds it; None if none."""
    name = module.removeprefix("masrl").removeprefix(".") or "masrl"
    if name in table:
        return table[name]
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        pattern = ".".join(parts[:k]) + ".*"
        if pattern in table:
            return table[pattern]
    return None


def upward(edges: Iterable[Import], table: Mapping[str, int]) -> list[Import]:
    """Imports from a lower layer into a higher one."""
    out = []
    for e in edges:
        a, b = layer_of(e.source, table), layer_of(e.target, table)
        if a is not None and b is not None and b > a:
            out.append(e)
    return out


def unplaced(root: Path, table: Mapping[str, int]) -> list[str]:
    return [m for m in modules(root) if layer_of(m, table) is None]


# ---------------------------------------------------------------- systems see the public API
API = "masrl.systems.api"  # what a system may import of masrl besides its own package (docs/api.md)


def own_package(module: str) -> str:
    """The package a system's module may import besides the API: `masrl.systems.router` for any module
    of the router's package, the module itself for a one-file system (`masrl.systems.single`)."""
    return ".".join(module.split(".")[:3])


def outside_api(edges: Iterable[Import]) -> list[Import]:
    """Imports by a system's module (under masrl.systems, the API itself and the package's table of
    built-in names aside) of a masrl module that is neither the API nor of the system's own package."""
    out = []
    for e in edges:
        if not e.source.startswith("masrl.systems.") or e.source == API:
            continue
        own = own_package(e.source)
        if e.target != API and e.target != own and not e.target.startswith(own + "."):
            out.append(e)
    return out


# ---------------------------------------------------------------- the summary
def summary(root: Path = ROOT, page: Path = ARCHITECTURE, largest: int = 10, brief: bool = False) -> str:
    """The graph in numbers, each followed by its items (with `brief`, cycles only)."""
    edges = imports(root)
    table = layer_table(page)
    found, up = cycles(edges), upward(edges, table)
    inner = [e for e in edges if e.in_function]
    statements = {(e.source, e.line) for e in inner}
    unreasoned = sorted({(e.source, e.line, e.target) for e in inner if not e.lazy_reason})
    module_level = {(e.source, e.target) for e in edges if not e.in_function}
    past_api = outside_api(edges)
    sizes = sorted(((len(p.read_text().splitlines()), p) for p in modules(root).values()), reverse=True)
    lines = [
        f"masrl import graph of {root} (layers: {page})",
        f"modules: {len(modules(root))}; module-level import edges: {len(module_level)}",
        f"cycles (strongly connected components over all imports): {len(found)}",
        *[f"  {' <-> '.join(c)}" for c in found],
        f"upward imports (a lower layer importing a higher one): {len(up)}",
        *[f"  {e.source} (layer {layer_of(e.source, table)}) -> {e.target} (layer {layer_of(e.target, table)}), "
          f"line {e.line}{' (in a function)' if e.in_function else ''}" for e in up],  # fmt: skip
        f"modules without a layer in the page: {len(unplaced(root, table))}",
        *[f"  {m}" for m in unplaced(root, table)],
        f"systems' modules importing masrl past the public API: {len({e.source for e in past_api})}",
        *[f"  {e.source} -> {e.target}, line {e.line}" for e in past_api],
        f"function-level masrl import statements: {len(statements)} "
        f"({len(statements) - len({(s, n) for s, n, _ in unreasoned})} with a `{LAZY}` reason)",
        *[f"  {s}:{n} -> {t} (no reason given)" for s, n, t in unreasoned],
        "largest files (lines):",
        *[f"  {n:5d} {p.relative_to(root.parent)}" for n, p in sizes[:largest]],
    ]
    if brief:
        lines = [x for x in lines if not x.startswith("  ") or " <-> " in x or x.strip()[0].isdigit()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=ROOT, help="a masrl package directory (default: this checkout's)")
    p.add_argument("--page", type=Path, default=ARCHITECTURE, help="the page whose layer table judges it")
    p.add_argument("--largest", type=int, default=10, help="how many of the largest files to list")
    p.add_argument("--brief", action="store_true", help="the numbers, the cycles and the largest files only")
    args = p.parse_args(argv)
    print(summary(args.root.resolve(), args.page, args.largest, args.brief))


if __name__ == "__main__":
    main()
