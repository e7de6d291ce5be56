"""The package's layout rules: modules sit in layers (``vitplast.LAYERS``) and import only from
their own layer and the layers below it, on the real import graph (at module level and inside
functions; by import statements and by ``import_module`` calls), without a cycle; every import
names the module's real path (there are no short names); no function is longer than
``MAX_LINES`` lines and no module longer than ``MAX_MODULE_LINES``; and every module has its own
test file, in the folder of its subpackage."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import vitplast
from vitplast.measure import components
from vitplast.train import configurations

PACKAGE = Path(vitplast.__file__).parent
#: Every module by its name (unique across subpackages) -> its file.
FILES = {p.stem: p for p in sorted(PACKAGE.rglob("*.py")) if p.stem != "__init__"}
MODULES = sorted(FILES)
#: The longest function the package allows (STYLE.md: modules readable in one sitting).
MAX_LINES = 80
#: The longest module the package allows (STYLE.md: modules stay small, ~300 lines).
MAX_MODULE_LINES = 400
TESTS = Path(__file__).parent


def _run_on_import(tree: ast.Module):
    """The nodes run on import: the module's body with everything in it (``if`` / ``try`` /
    ``with`` blocks, class bodies, the expressions of its statements) but not what is inside
    functions."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo += ast.iter_child_nodes(node)


#: The calls that import a module by its name, ``importlib.import_module("vitplast.x.y")``.
IMPORT_CALLS = ("import_module", "importlib.import_module")


def imports_in(tree: ast.Module, anywhere: bool = False) -> set[str]:
    """The ``vitplast`` modules that the module parsed as ``tree`` imports on import
    (``anywhere``: also inside functions): by import statements and by ``import_module`` calls
    naming the module in a string."""
    out = set()
    for node in (ast.walk(tree) if anywhere else _run_on_import(tree)):
        if isinstance(node, ast.ImportFrom) and node.module in ("vitplast", *(
                f"vitplast.{p}" for p in vitplast.LAYERS)):
            out |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vitplast."):
            out.add(node.module.split(".")[-1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[-1] for a in node.names if a.name.startswith("vitplast.")}
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) in IMPORT_CALLS
              and node.args and isinstance(node.args[0], ast.Constant)
              and str(node.args[0].value).startswith("vitplast.")):
            out.add(node.args[0].value.split(".")[-1])
    return out & set(MODULES)


def imports_of(name: str, anywhere: bool = False) -> set[str]:
    """The ``vitplast`` modules that module ``name`` imports at module level (``anywhere``:
    also inside functions)."""
    return imports_in(ast.parse(FILES[name].read_text()), anywhere)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> modules it imports) as a path, or None."""
    state: dict[str, str] = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt] if nxt in path else path + [nxt]
            if nxt not in state and (cycle := visit(nxt, path + [nxt])):
                return cycle
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node, [node])):
            return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_modules_import_each_other_without_a_cycle():
    graph = {name: imports_of(name) for name in MODULES}
    loaders = {m for m in graph["tasks"] if layer_of(m) != "base"}  # and its argument checks
    assert loaders == {"data", "paper_datasets", "suite"}  # loaders below the registry
    assert "tasks" not in graph["data"] | graph["paper_datasets"] | graph["suite"]
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"
    graph = {name: imports_of(name, anywhere=True) for name in MODULES}
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def dotted(name: str) -> str:
    """The import path of module ``name``: ``vitplast[.<subpackage>].<name>``."""
    return ".".join(FILES[name].relative_to(PACKAGE.parent).with_suffix("").parts)


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports_on_its_own(name):
    importlib.import_module(dotted(name))


def test_every_public_surface_names_real_objects():
    for name in MODULES:
        module = importlib.import_module(dotted(name))
        missing = [n for n in getattr(module, "__all__", []) if not hasattr(module, n)]
        assert not missing, f"{dotted(name)}.__all__ names {missing}"


def layer_of(name: str) -> str:
    """The layer of module ``name``: its subpackage, ``cli`` or ``base`` (``vitplast.LAYERS``)."""
    parent = FILES[name].parent
    if parent != PACKAGE:
        return parent.name
    return "cli" if name in vitplast.CLI else "base"


def upward(graph: dict[str, set[str]], layer, order=vitplast.LAYERS) -> list[str]:
    """Every import of ``graph`` (module -> modules) that goes up the layers ``order``."""
    rank = {name: i for i, name in enumerate(order)}
    return sorted(f"{a} ({layer(a)}) -> {b} ({layer(b)})" for a, bs in graph.items() for b in bs
                  if rank[layer(b)] > rank[layer(a)])


def test_upward_finds_an_import_that_climbs():
    graph = {"verdicts": {"paper"}, "plasticity": {"verdicts", "store"}, "store": set()}
    layer = {"paper": "base", "verdicts": "stats", "plasticity": "measure",
             "store": "experiments"}.get
    assert upward(graph, layer) == ["plasticity (measure) -> store (experiments)"]


def test_upward_finds_an_import_module_call_that_climbs():
    """An edge written as ``import_module("vitplast....")`` counts as an import: planted in a
    module of ``measure``, one to ``report`` at module level and one to ``experiments`` inside
    a function are both caught going up."""
    planted = ast.parse(
        "import importlib\n"
        "from importlib import import_module\n"
        "PLOTS = import_module('vitplast.report.plots')\n"
        "def late():\n"
        "    return importlib.import_module('vitplast.experiments.store')\n")
    assert imports_in(planted) == {"plots"}
    assert imports_in(planted, anywhere=True) == {"plots", "store"}
    graph = {"plasticity": imports_in(planted, anywhere=True)}
    assert upward(graph, layer_of) == ["plasticity (measure) -> plots (report)",
                                       "plasticity (measure) -> store (experiments)"]


def test_the_import_graph_reads_import_module_calls():
    """The real graph holds the package's own ``import_module`` edges (``kinds`` reads the
    study specs by name)."""
    assert "study_specs" in imports_of("kinds", anywhere=True)


def test_every_module_imports_only_its_own_layer_and_those_below():
    """The declared order, bottom to top, on the real import graph (inside functions too)."""
    on_disk = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert on_disk | {"base", "cli"} == set(vitplast.LAYERS)
    assert {m for m in MODULES if layer_of(m) == "cli"} == set(vitplast.CLI)
    graph = {name: imports_of(name, anywhere=True) for name in MODULES}
    assert upward(graph, layer_of) == []


def test_every_import_names_the_real_module():
    """No short names: ``from vitplast import plasticity`` fails (the module lives in
    ``vitplast.measure``), and no module, test, benchmark or notebook imports that way."""
    with pytest.raises(ImportError):
        exec("from vitplast import plasticity", {})
    top = {m for m in MODULES if FILES[m].parent == PACKAGE} | {"__version__"}
    sources = [*PACKAGE.rglob("*.py"), *TESTS.rglob("*.py"),
               *(PACKAGE.parent / "benchmarks").glob("*.py")]
    wrong = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "vitplast":
                wrong += [f"{path.name}: {a.name}" for a in node.names if a.name not in top]
    assert wrong == []


def test_every_subpackage_names_its_modules():
    for package in set(vitplast.LAYERS) - {"base", "cli"}:
        doc = importlib.import_module(f"vitplast.{package}").__doc__
        modules = [m for m in MODULES if FILES[m].parent.name == package]
        assert modules and [m for m in modules if f"``{m}``" not in doc] == []


def long_functions(max_lines: int = MAX_LINES) -> list[str]:
    """``module.function (lines)`` for every function of the package over ``max_lines``."""
    out = []
    for path in FILES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > max_lines:
                    out.append(f"{path.stem}.{node.name} ({lines} lines)")
    return out


def test_no_function_is_longer_than_80_lines():
    assert long_functions() == []


def test_no_module_is_longer_than_400_lines():
    """A module over ``MAX_MODULE_LINES`` is split along a seam of its concept (moving whole
    functions into a module with its own purpose), never shortened by cramming lines."""
    lines = {name: len(FILES[name].read_text().splitlines()) for name in MODULES}
    assert {name: n for name, n in lines.items() if n > MAX_MODULE_LINES} == {}


#: Modules whose tests still live in other test files or are still to be written: the set
#: shrinks as ``tests/test_<module>.py`` files are added (issue "data model / layout").
_NO_TEST_FILE_YET: set[str] = set()


def test_every_module_has_its_own_test_file():
    """``vitplast/<package>/<m>.py`` is tested in ``tests/<package>/test_<m>.py`` and a
    top-level ``vitplast/<m>.py`` in ``tests/test_<m>.py`` (the CLI, ``__main__``, in
    ``test_cli.py``), so that a module's claims are found where its name says."""
    where = {m: TESTS / FILES[m].parent.relative_to(PACKAGE) / f"test_{m}.py" for m in MODULES}
    missing = {m for m in MODULES if m != "__main__" and not where[m].exists()}
    assert missing == _NO_TEST_FILE_YET
    named = {p for p in TESTS.rglob("test_*.py") if p.stem.removeprefix("test_") in FILES}
    assert named == {where[m] for m in MODULES if where[m].exists()}  # none elsewhere


#: Knowledge with one home: a literal -> the module that defines it (issue 29, item 4).
ONE_HOME = {("MHA", "FC1", "FC2", "LN2", "LN1"): "paper",
            "vit_base_patch16_224.orig_in21k": "paper_datasets",
            ("contrast", "gaussian_noise", "motion_blur", "snow", "speckle_noise"): "corruptions"}


def _literals(tree: ast.Module):
    """Every string and every tuple or list of strings written in a module's code (not in its
    docstrings)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List)) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            yield tuple(e.value for e in node.elts)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


#: Knowledge written nowhere as a literal: derived from ``components.TABLE`` (its rows'
#: ``group``; the configuration order from the paper's), and imported everywhere.
DERIVED = {("MHA", "FC1", "FC2"): components.LINEARS, ("LN1", "LN2"): components.NORMS,
           ("full", "head", "MHA", "FC1", "FC2", "LN2", "LN1"): configurations.CONFIG_ORDER}


def test_component_groups_orders_and_the_paper_model_have_one_home():
    """The paper's orders and its model name are written once, in their module
    (``ONE_HOME``), and imported everywhere else; the component groups and the configuration
    order are written nowhere: the table's rows give them (``DERIVED``)."""
    homes = {}
    for name in MODULES:
        found = set(_literals(ast.parse(FILES[name].read_text())))
        for literal in [*ONE_HOME, *DERIVED]:
            if literal in found:
                homes.setdefault(literal, []).append(name)
    assert homes == {literal: [home] for literal, home in ONE_HOME.items()}
    assert all(literal == view for literal, view in DERIVED.items())


def test_the_default_pair_source_is_defined_once():
    """Every ``source=`` default is ``empirical.SOURCE``, not the task name written again."""
    copies = set()
    for name in MODULES:
        for node in ast.walk(ast.parse(FILES[name].read_text())):
            if isinstance(node, ast.arguments):
                names = [a.arg for a in [*node.posonlyargs, *node.args]][-len(node.defaults):] \
                    if node.defaults else []
                pairs = [*zip(names, node.defaults), *zip(
                    [a.arg for a in node.kwonlyargs], node.kw_defaults)]
                copies |= {name for arg, default in pairs if arg == "source"
                           and isinstance(default, ast.Constant) and default.value == "fmnist"}
    assert copies == set()


def _calls(tree: ast.Module) -> set[str]:
    """The dotted names a module calls (``os.replace``, ``tempfile.mkstemp``, ...)."""
    return {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}


def test_the_atomic_write_is_defined_once():
    """Only ``files.atomic_path`` moves a temp file over its target: every other module that
    writes a file it must not leave half-written goes through it (issue 29, item 3)."""
    movers = {name for name in MODULES
              if {"os.replace", "os.rename", "tempfile.mkstemp", "tempfile.NamedTemporaryFile"}
              & _calls(ast.parse(FILES[name].read_text()))}
    assert movers == {"files"}
    users = {name for name in MODULES if "atomic_path" in FILES[name].read_text()}
    assert {"files", "store", "cached"} <= users


#: The most of the package's internal imports that may sit inside functions (issue 58): an
#: import inside a function hides an edge of the graph from a reader of the module's head.
MAX_DEFERRED_SHARE = 0.10
#: The command line's torch-free start, ``vitplast --help`` and the study registry, in a child
#: process that prints the ``vitplast`` modules it loaded.
CLI_START = ("import sys\nimport vitplast.__main__, vitplast.experiments.studies\n"
             "print(' '.join(m for m in sys.modules if m.startswith('vitplast.')))")


def torch_free_path() -> set[str]:
    """The modules (by name, ``FILES``) that ``CLI_START`` loads in a fresh interpreter: the
    only ones where an internal import may wait inside a function, to keep torch out of
    ``vitplast --help``."""
    out = subprocess.run([sys.executable, "-c", CLI_START], cwd=PACKAGE.parent, capture_output=True,
                         text=True, check=True).stdout.split()
    return {m.split(".")[-1] for m in out} & set(MODULES)


def internal_imports(tree: ast.Module, dotted_name: str) -> list[tuple[int, str | None, set]]:
    """Every import statement of ``vitplast`` in the module parsed as ``tree`` (its dotted name
    ``dotted_name``; those under ``if TYPE_CHECKING:`` are not run, so not counted): (line, the
    function it sits in or None at module level, the modules it names by their dotted path:
    ``from vitplast.measure import plasticity`` names ``vitplast.measure.plasticity``,
    ``from vitplast.paper import X`` names ``vitplast.paper``)."""
    out = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, function or child.name)
            elif isinstance(child, ast.If) and ast.unparse(child.test).endswith("TYPE_CHECKING"):
                continue  # annotations only: never imported when the code runs
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                named = _named(child, dotted_name)
                if named:
                    out.append((child.lineno, function, named))
            else:
                visit(child, function)

    visit(tree, None)
    return out


def _named(node: ast.Import | ast.ImportFrom, dotted_name: str) -> set[str]:
    """The ``vitplast`` modules an import statement names (relative ones resolved)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == "vitplast"}
    base = node.module or ""
    if node.level:
        parts = dotted_name.split(".")[:-node.level]
        base = ".".join(parts + ([node.module] if node.module else []))
    if base.split(".")[0] != "vitplast":
        return set()
    modules = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
               for p in FILES.values()}
    subs = {f"{base}.{a.name}" for a in node.names} & modules
    return subs or {base}


def deferred_imports() -> tuple[int, dict[str, list[str]], dict[str, list[str]]]:
    """The package's internal import statements: their number, the deferred ones (inside a
    function) of modules off ``torch_free_path``, and the deferred ones that import again a
    module their file imports at module level; both by file, as ``line function: modules``."""
    path, total, off_path, again = torch_free_path(), 0, {}, {}
    for name in MODULES:
        found = internal_imports(ast.parse(FILES[name].read_text()), dotted(name))
        total += len(found)
        top = set().union(*[named for _, function, named in found if function is None])
        where = str(FILES[name].relative_to(PACKAGE.parent))
        for line, function, named in found:
            if function is None:
                continue
            text = f"{line} {function}: {', '.join(sorted(named))}"
            if name not in path:
                off_path.setdefault(where, []).append(text)
            if named & top:
                again.setdefault(where, []).append(text)
    return total, off_path, again


def _grouped(by_file: dict[str, list[str]]) -> str:
    return "".join(f"\n  {f}:" + "".join(f"\n    {t}" for t in lines)
                   for f, lines in sorted(by_file.items()))


def test_internal_imports_sit_at_module_level_but_on_the_torch_free_start():
    """An internal import waits inside a function only in a module of the command line's
    torch-free start (``torch_free_path``, computed, not listed); at most ``MAX_DEFERRED_SHARE``
    of all internal imports wait; no function imports again what its module imports already.
    (Issue 58, item 4.)"""
    total, off_path, again = deferred_imports()
    path = torch_free_path()
    assert {"__main__", "studies", "cli_notebooks", "files"} <= path and "models" not in path
    deferred = sum(1 for name in MODULES for _, function, _ in internal_imports(
        ast.parse(FILES[name].read_text()), dotted(name)) if function)
    assert off_path == {}, ("internal imports inside functions, off the torch-free command "
                            f"line path (move them to the module's head):{_grouped(off_path)}")
    assert again == {}, f"functions importing what their module has:{_grouped(again)}"
    assert deferred <= MAX_DEFERRED_SHARE * total, (deferred, total)


def test_the_import_check_finds_a_deferred_import_and_a_second_one():
    """Planted: a module-level import of ``gauge``, a function importing it again and one
    importing ``bounds`` (relatively): both found inside functions, the first as imported
    again."""
    planted = ast.parse("from vitplast.measure import gauge\n"
                        "def f():\n    from vitplast.measure import gauge\n"
                        "def g():\n    if True:\n        from .bounds import token_sigma\n")
    found = internal_imports(planted, "vitplast.measure.stream")
    assert found == [(1, None, {"vitplast.measure.gauge"}), (3, "f", {"vitplast.measure.gauge"}),
                     (6, "g", {"vitplast.measure.bounds"})]
