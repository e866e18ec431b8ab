"""The package's shape: module-level imports flow one way (no cycles), and the public face is cheap."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import ModuleType

import pytest

import normprops
from normprops.cuda.build import SOURCES

PACKAGE = Path(normprops.__file__).parent


def _module_level_imports(path: Path) -> set[str]:
    """The normprops modules ``path`` imports at module level (not inside functions)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("normprops")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("normprops"):
            found.add(node.module)
    return found


def _all_imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports anywhere: at module level and inside
    functions (an import run on first use still ties the two modules together), with
    ``from package import submodule`` counted as the submodule."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found & modules


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere, for the package at ``root``."""
    paths = {".".join(_parts(p, root)): p for p in root.rglob("*.py")}
    return {name: {m for m in _all_imports(path, set(paths)) if m != name} for name, path in paths.items()}


def _parts(path: Path, root: Path) -> tuple[str, ...]:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


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


def test_no_import_cycle() -> None:
    assert find_cycle(import_graph()) is None, " -> ".join(find_cycle(import_graph()))


def test_the_import_graph_sees_a_cycle_through_a_function(tmp_path: Path) -> None:
    # a imports b at module level; b imports a only inside a function, as a lazy import does.
    pkg = tmp_path / "planted"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from planted import b\n")
    (pkg / "b.py").write_text("def f():\n    from planted.a import x\n    return x\n")
    (pkg / "c.py").write_text("import planted.a\n")
    graph = import_graph(pkg)
    assert graph == {"planted": set(), "planted.a": {"planted", "planted.b"}, "planted.b": {"planted.a"},
                     "planted.c": {"planted.a"}}
    assert find_cycle(graph) == ["planted.a", "planted.b", "planted.a"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def unresolved_exports(package: ModuleType) -> list[str]:
    """The names of ``package.__all__`` that do not resolve to an object (``dir()`` lists them
    all, since it is built from the same table, so it cannot tell)."""
    missing = []
    for name in package.__all__:
        try:
            getattr(package, name)
        except AttributeError:
            missing.append(name)
    return missing


def test_the_face_of_the_package_imports_nothing_of_its_own() -> None:
    # Everything public is reached lazily: importing normprops runs no normprops submodule.
    assert _module_level_imports(PACKAGE / "__init__.py") == set()
    assert set(normprops.__all__) - {"__version__"} <= set(dir(normprops))
    assert unresolved_exports(normprops) == []


def test_a_bogus_export_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(normprops._EXPORTS, "hunt_kernels", "normprops.api")  # a misspelt name
    monkeypatch.setattr(normprops, "__all__", [*normprops.__all__, "hunt_kernels"])
    assert unresolved_exports(normprops) == ["hunt_kernels"]


def _module_level_imports_of_any_package(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_error_model_depends_on_no_cuda_module() -> None:
    """The bounds are arithmetic on a declaration: the error model, and everything it imports, reads
    no module of the CUDA layer (the launch shapes it shares with the launchers live below both)."""
    graph = import_graph()
    seen, todo = set(), ["normprops.errormodel"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph.get(module, ())
    assert not sorted(m for m in seen if m.startswith("normprops.cuda")), seen


def test_the_cuda_package_imports_cupy_only_when_used() -> None:
    # `normprops kernels` and the CPU-only tests import these modules on machines without CuPy.
    cuda = PACKAGE / "cuda"
    assert _module_level_imports(cuda / "__init__.py") == set()
    for path in cuda.glob("*.py"):
        imported = _module_level_imports_of_any_package(path)
        assert not {m for m in imported if m.split(".")[0] in ("cupy", "cupyx")}, path.name
    assert {p.name for p in cuda.glob("*.cu")} == set(SOURCES)  # every source is packaged and loadable


def test_no_module_is_over_600_lines() -> None:
    # A module past 600 lines holds more than one role; split it by role (the CUDA sources aside).
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}


def test_each_class_name_is_defined_once() -> None:
    where: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(str(path.relative_to(PACKAGE)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}


def test_names_are_imported_from_where_they_are_defined() -> None:
    # The strategies draw cases; the case type and the dtype helpers are taken from their own modules.
    import normprops.strategies

    assert not {"Case", "DTYPES", "StorageType", "get_dtype", "to_dtype"} & set(normprops.strategies.__all__)
    for path in [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "tests").glob("*.py"),
                 *(PACKAGE.parent / "scripts").glob("*.py"), *(PACKAGE.parent / "tools").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "normprops.strategies":
                names = {a.name for a in node.names}
                assert not names & {"Case", "DTYPES", "StorageType", "get_dtype", "to_dtype"}, path
    graph = import_graph()
    assert "normprops.report" not in graph["normprops.regressions"]  # JSON on disk is normprops.jsonio
    assert "normprops.strategies" not in graph["normprops.oracles"] | graph["normprops.judge"]


def test_every_folder_of_the_package_is_installed_with_its_files() -> None:
    # A folder left out of pyproject.toml's packages is missing from a wheel (an editable install
    # hides it); each one's files other than Python's are its package data.
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.relative_to(PACKAGE.parent).parts) for p in [PACKAGE, *PACKAGE.rglob("*")]
               if p.is_dir() and p.name != "__pycache__" and any(f.is_file() for f in p.iterdir())}
    assert folders == set(config["packages"])
    for folder in folders:
        path = PACKAGE.parent.joinpath(*folder.split("."))
        suffixes = {f.suffix for f in path.iterdir() if f.is_file() and f.suffix not in (".py", ".pyc")}
        declared = config.get("package-data", {}).get(folder, [])
        assert suffixes <= {Path(p).suffix for p in declared}, (folder, suffixes, declared)


#: The op names whose comparisons the pipeline should not make: it asks the op object instead.
_OP_NAMES = ("softmax", "masked_softmax", "layernorm", "rmsnorm", "softmax_backward",
             "rmsnorm_backward", "layernorm_backward")
_OP_NAME_COMPARISON = re.compile(
    r'== "(' + "|".join(_OP_NAMES) + r')"|is_softmax|SOFTMAX_OPS|in \("(softmax|layernorm|rmsnorm)')


def op_name_comparisons(root: Path = PACKAGE) -> list[str]:
    """``file:line`` of each comparison of an op's name outside ``normprops/ops`` (where each op
    declares itself) and ``normprops/examples`` (kernels, which are per op by nature)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if parts[0] in ("ops", "examples"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _OP_NAME_COMPARISON.search(line):
                found.append(f"{path.relative_to(root.parent)}:{number}")
    return found


def test_the_pipeline_asks_the_op_rather_than_comparing_its_name() -> None:
    found = op_name_comparisons()
    assert len(found) <= 5, f"{len(found)} comparisons of op names (at most 5): {', '.join(found)}"


def test_the_op_name_counter_sees_a_comparison(tmp_path: Path) -> None:
    pkg = tmp_path / "planted"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "judge.py").write_text('if case.op == "softmax":\n    pass\n'
                                  'elif op in ("layernorm", "x"):\n    pass\n')
    (pkg / "ops" / "softmax.py").write_text('if op == "softmax":\n    pass\n')  # the op's own module
    assert op_name_comparisons(pkg) == ["planted/judge.py:1", "planted/judge.py:3"]


def test_no_gradient_twin_modules() -> None:
    # The forward ops and their gradients share one pipeline: no backward_* module beside it.
    assert sorted(p.name for p in PACKAGE.glob("backward*.py")) == []


def _functions(tree: ast.AST):
    return (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    count = (len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None)
             + (a.kwarg is not None))
    bound = (a.posonlyargs + a.args)[:1]
    return count - (1 if bound and bound[0].arg in ("self", "cls") else 0)


#: Public entry points whose keyword-only arguments are the user's declaration, spelled out for
#: help() and IDEs; each builds a Declaration at once and hands it on.
_MANY_KEYWORDS = {"api.py:hunt_kernel"}
_MOST_PARAMETERS = 10


def _gpu_kernel(node: ast.AST) -> bool:
    """A ``@triton.jit`` kernel: its parameters are its launch's arguments (pointers, strides,
    block sizes), which a GPU kernel cannot take as one value."""
    return any(ast.unparse(d).startswith("triton.jit") for d in getattr(node, "decorator_list", ()))


def test_no_function_takes_more_than_ten_parameters() -> None:
    """The declaration travels as one value: a function that takes its fields one by one (and so
    lists them again) shows up here."""
    over = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        for node in _functions(ast.parse(path.read_text())):
            count, key = _parameter_count(node), f"{name}:{node.name}"
            if key in _MANY_KEYWORDS or count <= _MOST_PARAMETERS or _gpu_kernel(node):
                continue
            over.append(f"{key} takes {count} parameters (at most {_MOST_PARAMETERS}: pass a "
                        f"Declaration, a Target or a value of its own)")
    assert not over, "\n".join(over)


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


#: Where a ``--flag`` may be written: the CLI, the one place that spells a field for people
#: (normprops/flags.py), the pytest plugin's own options and the compiler's flags.
_FLAGS_ALLOWED = ("cli/", "flags.py", "plugin.py", "cuda/build.py")


def test_the_core_names_no_cli_flag() -> None:
    """A ``--flag`` in a string outside the CLI is the core speaking the CLI: messages name a field
    through :func:`normprops.flags.spelled` (both fronts' names), commands through
    :func:`normprops.flags.flag`."""
    import re

    pattern, found = re.compile(r"--[a-z]"), []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name.startswith(_FLAGS_ALLOWED):
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        count = sum(1 for node in ast.walk(tree) if isinstance(node, ast.Constant)
                    and isinstance(node.value, str) and id(node) not in docs
                    and pattern.search(node.value))
        if count:
            found.append(f"{name}: {count} strings name a --flag (use normprops.flags)")
    assert not found, "\n".join(found)
