"""One-way floors (STYLE.md): trace/findings <- graph <- front ends <- report <- commands.

Each check imports modules in a fresh interpreter and reads `sys.modules`, so a module-level
import anywhere along the chain that reaches a higher floor fails here."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

import commlint

PACKAGE = Path(commlint.__file__).parent


def loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


def under(modules: set[str], *prefixes: str) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def modules_of(folder: str) -> list[str]:
    return sorted(
        f"commlint.{folder}.{p.stem}"
        for p in (PACKAGE / folder).glob("*.py")
        if p.stem != "__init__"
    )


def test_package_root_loads_nothing_until_used():
    mods = loaded_after("import commlint")
    assert under(mods, "commlint") == ["commlint", "commlint._version"]
    mods = loaded_after("import commlint\ncommlint.Trace")
    assert "commlint.trace" in mods and not under(mods, "commlint.graph", "commlint.plans")


def test_linter_and_report_formats_never_load_checker_or_plans():
    imports = "\n".join(f"import {m}" for m in ["commlint.lint.engine", *modules_of("report")])
    mods = loaded_after(imports)
    assert "commlint.lint.engine" in mods and "commlint.report.sarif" in mods
    assert under(mods, "commlint.graph", "commlint.plans", "networkx", "torch") == []


def test_checker_never_loads_front_ends_reports_or_commands():
    mods = loaded_after("\n".join(f"import {m}" for m in modules_of("graph")))
    assert "commlint.graph.reorder" in mods
    assert (
        under(mods, "commlint.plans", "commlint.lint", "commlint.report", "commlint.commands") == []
    )


def test_checker_names_its_findings_without_loading_the_linter():
    """Findings carry their rule's name from the catalog; the catalog loads that rule's module
    only, never every rule (source rules need the linter, which the checker must not load)."""
    code = (
        "from commlint.plans.io import loads_trace\n"
        "from commlint.graph.check import check_trace\n"
        "plan = 'version: 1\\nworld_size: 2\\nranks:\\n"
        "  0: [{op: send, peer: 1}, {op: recv, peer: 1}]\\n"
        "  1: [{op: send, peer: 0}, {op: recv, peer: 0}]\\n'\n"
        "found = check_trace(loads_trace(plan)).findings\n"
        "assert [(f.code, f.name) for f in found] == [('CL201', 'deadlock-cycle')], found"
    )
    mods = loaded_after(code)
    assert "commlint.rules.cl201_deadlock_cycle" in mods
    assert (
        under(mods, "commlint.lint", "libcst", "commlint.rules.cl101_conditional_collective") == []
    )


@pytest.mark.parametrize("argv", [["check", "--help"], ["--version"]])
def test_command_line_start_up_skips_the_checker(argv):
    code = (
        "import sys\nfrom commlint.cli import build_parser\n"
        f"try:\n    build_parser().parse_args({argv!r})\nexcept SystemExit:\n    pass"
    )
    mods = loaded_after(code)
    assert under(mods, "commlint.graph", "networkx", "libcst") == []


def test_reorder_command_line_lives_in_the_command_layer(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text(
        "version: 1\nworld_size: 2\nranks:\n  0: [{op: all_reduce}]\n  1: [{op: all_reduce}]\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "commlint.commands.reorder", str(plan), str(tmp_path / "x.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "safe, also under every legal reordering" in out.stdout
    assert "x.yaml" in out.stderr and "Traceback" not in out.stderr
    assert not hasattr(__import__("commlint.graph.reorder").graph.reorder, "main")


def test_cached_check_never_loads_the_parser_or_the_dry_run(tmp_path):
    """pre-commit's usual run: every file's facts are in the cache, so the extractor stays
    unloaded; the dry-run's modules never load for `check`, and LibCST (kept for nnScaler's
    gencode) never loads for it, cold or warm: the linter analyses CPython's `ast` trees."""
    (tmp_path / "train.py").write_text(
        "import torch.distributed as dist\n\n\ndef step(x):\n    if dist.get_rank() == 0:\n"
        "        dist.all_reduce(x)\n"
    )
    code = (
        "import os, sys\nos.chdir(sys.argv[1])\nfrom commlint.cli import main\n"
        "code = main(['check', '--output-format', 'concise', 'train.py'])\n"
        "import json\nprint(json.dumps([code, sorted(sys.modules)]))"
    )

    def run() -> tuple[int, set[str]]:
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        exit_code, mods = json.loads(out.stdout.splitlines()[-1])
        assert "train.py:6" in out.stdout  # the finding is still reported from the cache
        return exit_code, set(mods)

    first, cold = run()
    assert first == 1 and "commlint.lint.extract" in cold
    assert under(cold, "libcst") == []
    second, warm = run()
    assert second == 1
    assert under(warm, "libcst", "commlint.lint.extract", "commlint.plans") == []


# --- The import graph, read from the source -------------------------------------------------
# Every `import` and `from ... import` under commlint/, at module level or inside a function
# (a lazy import still ties the floors together), is an edge from the importing module to the
# module it names. `from pkg import name` names `pkg.name` when that is a module, else `pkg`.

MAX_MODULE_LINES = 1_000

# Floors, lowest first. A module may import its own floor or any floor below it; the front
# ends share floor 2 and never import each other. Source rules (rules/cl1xx) are the linter's
# checks, so they count as the lint front end; the catalog (`rules/__init__`, `rules/docs`) is
# vocabulary beside findings.py.
FLOOR_BASE, FLOOR_GRAPH, FLOOR_FRONT, FLOOR_REPORT, FLOOR_TOP = range(5)
FRONT_ENDS = ("lint", "plans", "guard")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import statements under `if TYPE_CHECKING:` (annotations; never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def imported_names(path: Path, module: str, runtime: bool = False) -> list[tuple[str, int]]:
    """Every module name an import statement anywhere in `path` refers to, with its line;
    `runtime`: leave out the imports under `if TYPE_CHECKING:`."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = _type_checking_only(tree) if runtime else set()
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            found += [(f"{source}.{alias.name}", node.lineno) for alias in node.names]
            found.append((source, node.lineno))
    return found


def import_graph(runtime: bool = False) -> nx.DiGraph:
    """Modules and the imports between them; `runtime`: without annotation-only imports."""
    modules = package_modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        names = imported_names(path, module, runtime)
        # `from pkg import mod` names pkg.mod; keep `pkg` only when some name is not a module
        submodule_sources = {
            name.rpartition(".")[0] for name, _ in names if name in modules and "." in name
        }
        for name, line in names:
            if name.split(".")[0] != "commlint":
                continue
            if name in submodule_sources and not any(
                n.rpartition(".")[0] == name and n not in modules for n, _ in names
            ):
                continue
            target = name
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target != module and not graph.has_edge(module, target):
                graph.add_edge(module, target, line=line)
    return graph


def floor_of(module: str) -> tuple[int, str]:
    """(floor, room): the room tells front ends apart on their shared floor."""
    parts = module.split(".")
    room = parts[1] if len(parts) > 1 else ""
    if module in ("commlint", "commlint.cli", "commlint.__main__") or room == "commands":
        return FLOOR_TOP, "commands"
    if room == "report":
        return FLOOR_REPORT, "report"
    if room in FRONT_ENDS:
        return FLOOR_FRONT, room
    if room == "rules" and module not in ("commlint.rules", "commlint.rules.docs"):
        return FLOOR_FRONT, "lint"
    if room == "graph":
        return FLOOR_GRAPH, "graph"
    return FLOOR_BASE, "base"


def test_import_graph_sees_lazy_imports():
    """The graph is only as good as its reading: a function-level import counts."""
    graph = import_graph()
    assert graph.has_edge("commlint", "commlint.graph.check")  # inside check()
    assert graph.has_edge("commlint.commands.reorder", "commlint.graph.explain")  # in main()
    assert floor_of("commlint.rules.cl101_conditional_collective") == (FLOOR_FRONT, "lint")
    assert floor_of("commlint.trace") == (FLOOR_BASE, "base")
    annotations_only = ("commlint.lint.perrank_builtins", "commlint.lint.perrank")
    assert graph.has_edge(*annotations_only)
    assert not import_graph(runtime=True).has_edge(*annotations_only)


def test_no_import_circles():
    """A circle means two rooms are one room or a piece sits on the wrong floor. An import
    under `if TYPE_CHECKING:` never runs (a mixin naming the class it is mixed into), so it
    closes no circle; it still counts for the floors."""
    graph = import_graph(runtime=True)
    circles = [
        sorted(component)
        for component in nx.strongly_connected_components(graph)
        if len(component) > 1
    ]
    described = [
        "\n  ".join(
            f"{a} -> {b} (line {graph.edges[a, b]['line']})"
            for a, b in graph.subgraph(circle).edges
        )
        for circle in circles
    ]
    assert circles == [], "import circles:\n  " + "\n\n  ".join(described)


def test_imports_run_one_way_down_the_floors():
    graph = import_graph()
    wrong = []
    for importer, imported in sorted(graph.edges):
        (floor_a, room_a), (floor_b, room_b) = floor_of(importer), floor_of(imported)
        upward = floor_b > floor_a
        sideways = floor_a == floor_b == FLOOR_FRONT and room_a != room_b
        if upward or sideways:
            wrong.append(
                f"{importer} -> {imported} (line {graph.edges[importer, imported]['line']})"
            )
    assert wrong == [], "imports against the floors:\n  " + "\n  ".join(wrong)


def test_no_module_over_a_thousand_lines():
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"
