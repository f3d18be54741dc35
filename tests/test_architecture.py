"""The package's layers form a DAG: no module imports, directly or through others, a module that
imports it back. Imports inside functions count too: a lazy import hides a cycle, it does not
remove it.

The graph is read from the source (an AST walk), so it sees every import whether or not it runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "seqpack_cli"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` lives in (`a.b.c` names a module, or something defined in `a.b`)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from a import b` imports the module a.b when there is one, else a name of a.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        elif (
            isinstance(node, ast.Constant) and path.name == "__init__.py" and name != "seqpack_cli"
        ):
            # A subpackage's lazy re-exports name their modules as strings: edges too.
            value = node.value
            if not (isinstance(value, str) and value.startswith("seqpack_cli.")):
                continue
            targets = [value]
        else:
            continue
        for target in targets:
            owner = _owner(target, modules) if target.startswith("seqpack_cli") else None
            # The package itself only re-exports lazily, by name: not an edge.
            if owner is not None and owner not in (name, "seqpack_cli"):
                yield owner


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: set(_imports(name, path, modules)) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path `[a, b, ..., a]`, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_the_package_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    # The check above can fail: a graph with a cycle hidden two levels down is caught.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_lazy_re_exports_of_subpackages() -> None:
    graph = import_graph()
    assert "seqpack_cli.epoch" in graph["seqpack_cli.packing"]


def test_the_graph_sees_imports_inside_functions() -> None:
    graph = import_graph()
    # describe imports prepared lazily (inside functions): still an edge.
    assert "seqpack_cli.prepared" in graph["seqpack_cli.stats.describe"]


# The layers, lowest first: a module may import from its own unit (module or subpackage) or from
# a lower layer, never from its own layer's other units or from above. Entry points (`__main__`)
# sit above everything. docs/contributing.md's "Where things are" lists the same order.
LAYERS: list[set[str]] = [
    {"errors", "input_names"},
    {"checks", "target_counts", "remote", "npy_files"},
    {"progress", "interrupts", "seeding", "templates", "token_sources", "over_cap", "tokenize"},
    {"epoch", "masking", "context_parallel"},
    {"packing", "sharding", "collate"},
    {"prepared"},
    {"prepare", "data"},
    {"stats", "hf"},
    {"cli"},
]


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "seqpack_cli"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """The imports of `graph` that do not go down the layers, as "module -> target"."""
    rank = {unit: level for level, units in enumerate(LAYERS) for unit in units}
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if _unit(module) in rank and module.rpartition(".")[2] != "__main__"
        for target in targets
        if _unit(target) != _unit(module) and rank[_unit(target)] >= rank[_unit(module)]
    )


def test_every_import_goes_down_the_layers() -> None:
    graph = import_graph()
    units = {_unit(module) for module in graph} - {"seqpack_cli", "__main__"}
    assert units == set().union(*LAYERS), "every top-level module and subpackage has a layer"
    upward = upward_imports(graph)
    assert not upward, "imports that do not go down the layers: " + ", ".join(upward)


def test_the_layer_check_catches_upward_and_sideways_imports() -> None:
    graph = {
        "seqpack_cli.packing.fit": {"seqpack_cli.stats.sweep", "seqpack_cli.packing.groups"},
        "seqpack_cli.epoch.plan": {"seqpack_cli.prepared.reader", "seqpack_cli.seeding"},
        "seqpack_cli.prepare.__main__": {"seqpack_cli.cli.app"},  # an entry point: allowed
    }
    assert upward_imports(graph) == [
        "seqpack_cli.epoch.plan -> seqpack_cli.prepared.reader",
        "seqpack_cli.packing.fit -> seqpack_cli.stats.sweep",
    ]


def _from_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every `from seqpack_cli... import name` in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("seqpack_cli"):
            found.extend((node.lineno, node.module or "", alias.name) for alias in node.names)
    return found


def test_no_module_imports_another_modules_private_name() -> None:
    # A `_name` is its module's own business: a name another module needs is public (and in
    # its module's __all__), so renaming a private helper never breaks a distant caller.
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: from {module} import {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, module, name in _from_imports(path)
        if name.startswith("_") and not name.startswith("__")
    ]
    assert offenders == []


def test_the_private_import_rule_catches_one(tmp_path: Path) -> None:
    module = tmp_path / "example.py"
    module.write_text("from seqpack_cli.prepare.token_store import _chunk, write_token_store\n")
    assert [name for _, _, name in _from_imports(module) if name.startswith("_")] == ["_chunk"]


def _module_maps() -> list[tuple[Path, str, list[str]]]:
    """(subpackage, its __init__ docstring, its modules and subpackages) for every subpackage."""
    maps = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        folder = init.parent
        if folder == PACKAGE:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        modules = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
        modules += [p.name for p in folder.iterdir() if (p / "__init__.py").exists()]
        maps.append((folder, doc, sorted(modules)))
    return maps


def test_every_subpackage_docstring_maps_every_module_it_holds() -> None:
    # One module map per subpackage, in its docstring: a newcomer reads it before the files.
    unmapped = [
        f"{folder.relative_to(PACKAGE.parent)}/{module}"
        for folder, doc, modules in _module_maps()
        for module in modules
        if f"`{module}`" not in doc
    ]
    assert unmapped == []


def test_a_module_map_names_no_module_that_is_gone() -> None:
    # A bullet that opens with a module's name ("- `name`:", "- `a`, `b`:") names a module here.
    import re

    stale = [
        f"{folder.relative_to(PACKAGE.parent)}: `{name}`"
        for folder, doc, modules in _module_maps()
        for line in doc.splitlines()
        for names in re.findall(r"^- ((?:`\w+`(?:, )?)+):", line)
        for name in re.findall(r"`(\w+)`", names)
        if name not in modules
    ]
    assert stale == []


def test_the_wheel_lists_every_subpackage() -> None:
    # setuptools installs only the packages pyproject names: a subpackage left out is missing
    # from a non-editable install (stats/render/ was, for a while).
    import tomllib

    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(PACKAGE.parent).parts)
        for init in PACKAGE.rglob("__init__.py")
    }
    assert sorted(on_disk - listed) == []
