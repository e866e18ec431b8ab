"""The package's shape: module-level imports flow one way (no cycles), and the public face is cheap."""

from __future__ import annotations

import ast
from pathlib import Path

import normprops
from normprops.cuda.build import SOURCES

PACKAGE = Path(normprops.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports(path: Path) -> set[str]:
    """The normprops modules ``path`` imports at module level (not inside functions)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("normprops")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("normprops"):
            found.add(node.module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in _module_level_imports(path) if m in modules and m != name}
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_module_level_import_cycle() -> None:
    assert find_cycle(import_graph()) is None, " -> ".join(find_cycle(import_graph()))


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_face_of_the_package_imports_nothing_of_its_own() -> None:
    # Everything public is reached lazily: importing normprops runs no normprops submodule.
    assert _module_level_imports(PACKAGE / "__init__.py") == set()
    assert set(normprops.__all__) - {"__version__"} <= set(dir(normprops))


def _module_level_imports_of_any_package(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_cuda_package_imports_cupy_only_when_used() -> None:
    # `normprops kernels` and the CPU-only tests import these modules on machines without CuPy.
    cuda = PACKAGE / "cuda"
    assert _module_level_imports(cuda / "__init__.py") == set()
    for path in cuda.glob("*.py"):
        imported = _module_level_imports_of_any_package(path)
        assert not {m for m in imported if m.split(".")[0] in ("cupy", "cupyx")}, path.name
    assert {p.name for p in cuda.glob("*.cu")} == set(SOURCES)  # every source is packaged and loadable
