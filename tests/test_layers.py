"""The package layout holds: imports point down, each module imports the base, its own package
or a lower layer, and no modules import each other, read from the source with `ast` (nothing is
imported, so no import side effect can hide or fake an edge). Every import counts: at the top,
inside a function or under `if TYPE_CHECKING`. And the modules that promise to run without torch
(the exported runtime and the request path it shares) import without it."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nmt"
# the layers, lowest first: the base is every module at the top of nmt/; a package imports only
# its own modules and the layers below it, never a sibling of its own layer
LAYERS = {
    "base": 0,
    "data": 1,
    "models": 1,
    "translation": 2,
    "documents": 3,
    "training": 4,
    "serving": 4,
    "export": 4,
    "pretrained": 4,
    "cli": 5,
}
# the base: what every job stands on (the issue of the layout: at most 11 modules)
BASE_MOST = 11


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, int]]:
    """(imported nmt module, line) for every import in the file; `from nmt.x import y` counts as
    nmt.x.y when that is a module, else nmt.x."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per extra dot
                base = ".".join(package[: len(package) - node.level + 1] + [base]).strip(".")
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((candidate if is_module(candidate) else base, node.lineno))
    return [(name, line) for name, line in found if name == "nmt" or name.startswith("nmt.")]


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def job(module: str) -> str:
    """The package a module belongs to ("base" for the modules at the top of nmt/)."""
    parts = module.split(".")
    inside = len(parts) > 2 or (len(parts) == 2 and is_package(module))
    return parts[1] if inside else "base"


def is_package(name: str) -> bool:
    return (ROOT.joinpath(*name.split(".")) / "__init__.py").is_file()


def graph() -> dict[str, list[tuple[str, int, Path]]]:
    edges: dict[str, list[tuple[str, int, Path]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        edges[module_name(path)] = [(target, line, path) for target, line in imports(path)]
    return edges


def test_the_graph_is_read():
    """The walk sees the imports it must judge (a broken walk would pass everything)."""
    edges = graph()
    assert ("nmt.training.trainer", "nmt.training.validation") in {
        (module, target) for module, targets in edges.items() for target, _, _ in targets
    }
    assert job("nmt.cli.main") == "cli" and job("nmt.models.rnn") == "models"
    assert job("nmt.translation.search.beam") == "translation" and job("nmt.config") == "base"
    assert len(edges) > 40


def test_every_package_has_a_layer():
    """A new package is placed in LAYERS before it lands: otherwise nothing judges its imports."""
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages <= set(LAYERS), f"packages without a layer: {packages - set(LAYERS)}"


def test_the_base_is_small():
    """The top of nmt/ holds what every job stands on, and no more (a module of one job belongs
    in that job's package)."""
    base = sorted(p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(base) <= BASE_MOST, f"{len(base)} modules at the top of nmt/: {base}"


def test_imports_point_down():
    """A module imports the base, its own package, or a package of a lower layer: never one of
    its own layer (data and models are strangers) or above."""
    wrong = []
    for module, targets in graph().items():
        mine = job(module)
        level = LAYERS[mine]
        for target, line, path in targets:
            theirs = job(target)
            if theirs == mine or (theirs == "base" and mine != "base"):
                continue
            if LAYERS[theirs] >= level:
                wrong.append(
                    f"{path.relative_to(ROOT)}:{line}: {module} ({mine}) imports {target}"
                    f" ({theirs})"
                )
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_the_runtime_path_imports_without_torch():
    """The exported runtime and the request path it shares promise to run where torch is not
    installed: importing them loads no torch (a fresh interpreter, so nothing is cached)."""
    modules = ["nmt.export.runtime", "nmt.translation.request", "nmt.translation.inputs"]
    code = f"import sys; import {', '.join(modules)}; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False"], f"importing {modules} loaded torch"


def test_no_import_cycles():
    """No chain of imports leads from a module back to itself (nmt.x -> nmt.y -> nmt.x)."""
    edges = graph()
    state: dict[str, str] = {}  # "open" while on the current path, "done" after
    cycles = []

    def visit(module: str, path: list[tuple[str, str, int, Path]]) -> None:
        state[module] = "open"
        for target, line, where in edges[module]:
            if target not in edges:
                continue
            step = (module, target, line, where)
            if state.get(target) == "open":
                start = next(i for i, (m, *_) in enumerate(path) if m == target)
                cycles.append(
                    "; ".join(
                        f"{m} imports {t} ({w.relative_to(ROOT)}:{n})"
                        for m, t, n, w in [*path[start:], step]
                    )
                )
            elif target not in state:
                visit(target, [*path, step])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


# functions of nmt/ that may take more than MAX_PARAMETERS parameters: a list that only shrinks.
# An option that a call carries belongs in a Request (nmt/translation/request.py), a search's input
# in a SearchJob (nmt/translation/search/job.py), not in one more keyword threaded through every
# layer.
MAX_PARAMETERS = 8
MANY_PARAMETERS = {
    # the library's documented wrapper, kept for its callers: Request's fields as keywords
    "nmt.translation.translator.Translator.translate_full",
}


def functions() -> dict[str, int]:
    """Every function and method of nmt/ by qualified name, with its parameters (self and cls
    left out; *args and **kwargs count one each)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}.{child.name}")
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    a = child.args
                    names = [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
                    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
                    count = len([n for n in names if n not in ("self", "cls")])
                    found[f"{prefix}.{child.name}"] = count
                    visit(child, f"{prefix}.{child.name}")

        visit(tree, module_name(path))
    return found


def test_no_function_grows_a_long_parameter_list():
    """The ratchet: no function of nmt/ takes more than MAX_PARAMETERS parameters unless it is
    in MANY_PARAMETERS, and every name there still does (so the list shrinks when one is
    fixed)."""
    counts = functions()
    # the walk sees methods and functions
    assert counts["nmt.translation.search.driver.search_all"] == 4
    assert "nmt.translation.translator.Translator.prepare" in counts
    long = {name for name, count in counts.items() if count > MAX_PARAMETERS}
    assert not long - MANY_PARAMETERS, (
        f"more than {MAX_PARAMETERS} parameters: {long - MANY_PARAMETERS}"
    )
    assert not MANY_PARAMETERS - long, (
        f"no longer long, take them off the list: {MANY_PARAMETERS - long}"
    )


# what nmt/serving/ may import from nmt/documents/: the text loop as one object (started by
# `text_job`, driven by the server), its result, and what an answer writes. The loop's inner steps
# (planning, the check for skipped sentences, rejoining) stay in documents/: a server that
# assembled them again would be a second copy of the loop
SERVING_FROM_DOCUMENTS = {
    ("nmt.documents.job", "TextJob"),
    ("nmt.documents.texts", "text_job"),
    ("nmt.documents.texts", "TEXT_FORMATS"),
    ("nmt.documents.blocks", "BlockResult"),
    ("nmt.documents.alignment", "moses"),
    # the table of file formats: a file read into its segments and written back (no step of
    # the loop: the segments go through the text job like any text)
    ("nmt.documents.formats", "BY_EXTENSION"),
}
SERVING_MOST_LINES = 60  # the longest function of nmt/serving/


def test_serving_drives_the_text_job_and_does_not_assemble_it():
    """nmt/serving/ imports from nmt/documents/ only the job's public names
    (SERVING_FROM_DOCUMENTS), never the loop's inner steps."""
    found = set()
    for path in sorted((PACKAGE / "serving").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nmt.doc"):
                found |= {(node.module, alias.name, path.name) for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {(a.name, "*", path.name) for a in node.names if "documents" in a.name}
    assert ("nmt.documents.job", "TextJob", "server.py") in found  # the walk sees them
    wrong = sorted(f for f in found if f[:2] not in SERVING_FROM_DOCUMENTS)
    assert not wrong, f"nmt/serving/ imports the text loop's inner parts: {wrong}"


def test_no_function_of_serving_is_long():
    """No function of nmt/serving/ is longer than SERVING_MOST_LINES lines (a route table, a
    request's handler, a shape's reader each fit in one screen)."""
    long = []
    for path in sorted((PACKAGE / "serving").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > SERVING_MOST_LINES:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"functions over {SERVING_MOST_LINES} lines: {long}"
