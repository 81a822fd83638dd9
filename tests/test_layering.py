"""The package tree reads bottom-up: no import cycle among air_core's packages, no private name reached
across a package, and the core never importing a front door (nor one door the other).

Every import in a module counts, inside functions too: a lazy import is still a dependency, and a cycle
that only runs late is one a refactor trips over. An import under `if TYPE_CHECKING:` never runs, so it
makes no cycle (it is how a module names, for an annotation, a type of a layer above it: a reader's
`Source`); it still counts for private names and for the doors.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
TOP = ("air_core", "air_hf", "air_ray")
DOORS = ("air_hf", "air_ray")


class Import(NamedTuple):
    importer: str  # the importing module, in full
    target: str    # the module imported (a submodule, where `from package import name` names one)
    name: str      # the name taken from it ("" for `import target`)
    line: int
    typing_only: bool = False  # under `if TYPE_CHECKING:`


def _modules() -> dict[str, Path]:
    out = {}
    for top in TOP:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES.get(module, Path()).name == "__init__.py"


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
                                         or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST, typing_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node, typing_only
    if _type_checking(node):
        for child in node.body:  # type: ignore[attr-defined]
            yield from _import_nodes(child, True)
        for child in node.orelse:  # type: ignore[attr-defined]
            yield from _import_nodes(child, typing_only)
        return
    for child in ast.iter_child_nodes(node):
        yield from _import_nodes(child, typing_only)


def _imports(module: str, path: Path) -> Iterator[Import]:
    package = module if _is_package(module) else module.rpartition(".")[0]
    for node, typing_only in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, "", node.lineno, typing_only)
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            if submodule in MODULES:
                yield Import(module, submodule, "", node.lineno, typing_only)
            else:
                yield Import(module, source, alias.name, node.lineno, typing_only)


IMPORTS = [imp for module, path in MODULES.items() for imp in _imports(module, path)]


def _node(module: str) -> str | None:
    """air_core's package holding `module` (`air_core.io`), or the top-level module itself (`air_core.dist`)."""
    parts = module.split(".")
    if parts[0] != "air_core":
        return None
    if len(parts) == 1:
        return "air_core"
    return ".".join(parts[:2])


def _package(module: str) -> str:
    """The folder a module sits in, for privacy: air_core's subfolders, air_core's own folder, air_hf, air_ray."""
    parts = module.split(".")
    if parts[0] == "air_core" and len(parts) > 1 and _is_package(".".join(parts[:2])):
        return ".".join(parts[:2])
    return parts[0]


def _cycle(graph: dict[str, dict[str, Import]]) -> list[str] | None:
    """One cycle of `graph` as the list of its nodes (the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the path being walked, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_tree_is_read():
    assert {"air_core.io.transport", "air_core.doors", "air_hf", "air_ray"} <= set(MODULES)
    assert any(imp.importer == "air_core.doors" and imp.target == "air_core.io.transport" for imp in IMPORTS)


def test_relative_imports_resolve_to_full_names(tmp_path):
    pkg = tmp_path / "air_core" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import mod\n")
    (pkg / "mod.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from ..grid import Grid\nelse:\n"
                                "    def f():\n        from ..errors import AirError\n        from .. import errors\n")
    MODULES.update({"air_core.pkg": pkg / "__init__.py", "air_core.pkg.mod": pkg / "mod.py"})
    try:
        assert [i.target for i in _imports("air_core.pkg", pkg / "__init__.py")] == ["air_core.pkg.mod"]
        assert [(i.target, i.name, i.typing_only) for i in _imports("air_core.pkg.mod", pkg / "mod.py")] == [
            ("typing", "", False), ("air_core.grid", "Grid", True),
            ("air_core.errors", "AirError", False), ("air_core.errors", "", False)]
    finally:
        del MODULES["air_core.pkg"], MODULES["air_core.pkg.mod"]


def test_a_cycle_is_found_and_named():
    imp = Import("", "", "", 0)
    assert _cycle({"a": {"b": imp}, "b": {"c": imp}, "c": {"a": imp}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": imp}, "b": {}, "c": {"a": imp, "b": imp}}) is None


def test_air_core_packages_have_no_cycle():
    graph: dict[str, dict[str, Import]] = {}
    for imp in IMPORTS:
        src, dst = _node(imp.importer), _node(imp.target)
        if src and dst and src != dst and not imp.typing_only:
            graph.setdefault(src, {}).setdefault(dst, imp)
    cycle = _cycle(graph)
    assert cycle is None, f"air_core's packages import each other in a cycle: {' -> '.join(cycle)}\n" + "\n".join(
        f"  {a} -> {b}: {graph[a][b].importer} line {graph[a][b].line} imports "
        f"{graph[a][b].target}{'.' + graph[a][b].name if graph[a][b].name else ''}"
        for a, b in zip(cycle, cycle[1:]))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_name_crosses_a_package():
    reached = [
        f"{imp.importer} line {imp.line}: {imp.target}{'.' + imp.name if imp.name else ''}"
        for imp in IMPORTS
        if imp.target.split(".")[0] in TOP and _package(imp.importer) != _package(imp.target)
        and (_private(imp.name) or any(map(_private, imp.target.split("."))))
    ]
    assert not reached, "private names imported from another package:\n  " + "\n  ".join(reached)


def test_the_core_imports_no_door_and_no_door_the_other():
    wrong = [
        f"{imp.importer} line {imp.line}: {imp.target}"
        for imp in IMPORTS
        if (top := imp.target.split(".")[0]) in DOORS and top != imp.importer.split(".")[0]
    ]
    assert not wrong, "a door imported from the core or from the other door:\n  " + "\n  ".join(wrong)
