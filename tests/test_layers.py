"""Imports go one way: down the list of packages in LAYERS, never up, and never across one layer.

Between top-level packages: protos <- snapshot <- coordinator <- spark <- bench (PACKAGE_ORDER). Inside
coordinator/, each module belongs to one of its packages (`coordinator.<package>`), and the packages stand in
the layers of LAYERS, lowest first: a module imports modules of its own package or of a lower layer only. The
domain packages (commits, topics, files, reads) share one layer, so none of them imports another: each plugs
into the runtime and the machine below it. No module takes part in an import cycle.

Two kinds of import are told apart. A module-level import (at the top, or under `if` or `try` at
module level, `if TYPE_CHECKING:` included) runs when the module is imported: those must respect
PACKAGE_ORDER and form no cycle. An import inside a function runs when the function does (a lazy
import, e.g. `diskless orphan-scan` importing spark/ only when it runs): it may point anywhere
across top-level packages and may close a cycle, since no module is half-initialised when it runs. Inside
coordinator/, LAYERS applies to both kinds.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "coordinator"
# Every package with hand-written modules (protos/*_pb2*.py are generated, and import only each other).
ALL_PACKAGES = (REPO / "protos", REPO / "snapshot", PACKAGE, REPO / "spark", REPO / "bench")
# Top-level packages, lowest first: a module-level import goes to its own package or one before it.
PACKAGE_ORDER = ("protos", "snapshot", "coordinator", "spark", "bench")

# coordinator/'s packages, lowest layer first; packages of one layer do not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("config",),  # settings, their loading and rules
    ("base",),  # errors, invariants, results, clock, backoff, metrics, logging, child processes
    ("machine",),  # the replicated state machine: view, records, record kinds, catalog, the SQLite state
    ("edge",),  # the gRPC edge: admission, the call gate, access control, TLS
    ("runtime",),  # one coordinator: shard, metadata log, replication; the node's coordinators
    ("cluster",),  # etcd, the controller, assignment, calls between nodes
    ("commits", "topics", "files", "reads", "consolidation"),  # the domain: each RPC with its rules and workers
    ("client",),  # the routing client a broker uses
    ("node",),  # a node assembled: router, services, processes
    ("cli",),  # the `diskless` command
    ("__main__",),
)
LAYER_OF = {package: index for index, layer in enumerate(LAYERS) for package in layer}
# The functional core: checks and records. They must not touch sockets, disk or SQLite.
PURE_CORE = {
    "coordinator.machine.catalog",
    "coordinator.machine.object_keys",
    "coordinator.machine.producers",
    "coordinator.machine.records",
    "coordinator.machine.topic_names",
    "coordinator.machine.view",
    "coordinator.base.result",
    "coordinator.commits.parts",
    "coordinator.commits.producer_expiry",
    "coordinator.commits.retries",
    "coordinator.commits.rules",
    "coordinator.consolidation.rules",
    "coordinator.topics.partition_checks",
    "coordinator.topics.rules",
    "coordinator.topics.config_checks",
    "coordinator.topics.topic_configs",
    "coordinator.topics.switch.rules",
    "coordinator.files.ownership",
    "coordinator.files.loans",
    "coordinator.files.move_chunks",
    "coordinator.topics.partition_balance",
    "coordinator.topics.move_protocol",
    "coordinator.topics.move_adoption",
    "coordinator.cluster.assignment",
    "coordinator.reads.produce_gateways",
    "coordinator.runtime.operation",
    "coordinator.runtime.ports",
}
SHELL_MODULES = {"grpc", "apsw", "os", "socket", "asyncio", "sqlite3", "time", "subprocess", "pathlib"}
SHELL_PACKAGES = ("coordinator.machine.state", "coordinator.runtime.log", "coordinator.runtime.shard")


@dataclass
class Imports:
    module_level: set[str] = field(default_factory=set)
    lazy: set[str] = field(default_factory=set)  # inside a function

    @property
    def every(self) -> set[str]:
        return self.module_level | self.lazy


def _module_name(path: Path) -> str:
    relative = path.relative_to(REPO).with_suffix("")
    return ".".join(p for p in relative.parts if p != "__init__")


def _names(node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if not node.module:
        return set()
    return {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}


def _imports(path: Path) -> Imports:
    found = Imports()

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            (found.lazy if in_function else found.module_level).update(_names(node))
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return found


def _hand_written(path: Path) -> bool:
    return not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))


@functools.cache  # one parse of the tree for every test here (the tests only read it)
def _modules(packages: tuple[Path, ...] = ALL_PACKAGES) -> dict[str, Imports]:
    return {_module_name(p): _imports(p) for package in packages for p in package.rglob("*.py") if _hand_written(p)}


def _package(module: str) -> str:
    return module.split(".")[0]


def _coordinator_package(module: str) -> str | None:
    """`coordinator.<package>.…` → `<package>`; None for `coordinator` itself (its version string only)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "coordinator" else None


def test_every_module_of_coordinator_is_in_a_package_of_a_layer() -> None:
    modules = _modules((PACKAGE,))
    loose = sorted(m for m in modules if m != "coordinator" and _coordinator_package(m) not in LAYER_OF)
    assert not loose, f"place these in a package of LAYERS (coordinator/ keeps no loose modules): {loose}"
    assert set(LAYER_OF) == {_coordinator_package(m) for m in modules} - {None}, "LAYERS names a package not there"


def _layer_violations(modules: dict[str, Imports]) -> list[str]:
    violations = []
    for name, imports in sorted(modules.items()):
        package = _coordinator_package(name)
        if package is None:
            continue
        for imported in sorted(imports.every):
            target = _coordinator_package(imported)
            if target is None or target == package or target not in LAYER_OF:
                continue
            if LAYER_OF[target] > LAYER_OF[package]:
                violations.append(f"{name} ({package}) imports {imported} ({target}, a higher layer)")
            elif LAYER_OF[target] == LAYER_OF[package]:
                violations.append(f"{name} ({package}) imports {imported} ({target}, a package of the same layer)")
    return violations


def test_no_module_imports_a_higher_layer_or_a_package_beside_it() -> None:
    violations = _layer_violations(_modules((PACKAGE,)))
    assert not violations, "\n".join(violations)


def test_pure_core_does_no_io() -> None:
    modules = _modules((PACKAGE,))
    assert set(modules) >= PURE_CORE, f"gone from the tree: {PURE_CORE - set(modules)}"
    for name in PURE_CORE:
        imports = modules[name].every
        shell = {i.split(".")[0] for i in imports} & SHELL_MODULES
        assert not shell, f"{name} imports {shell}: checks and records must stay pure"
        assert not any(i.startswith(SHELL_PACKAGES) for i in imports), f"{name} imports the state, log or shard"


def test_packages_import_only_the_packages_below_them_at_module_level() -> None:
    modules = _modules()
    assert {_package(name) for name in modules} == set(PACKAGE_ORDER), "a new top-level package: place it"
    violations = []
    for name, imports in modules.items():
        level = PACKAGE_ORDER.index(_package(name))
        for imported in sorted(imports.module_level):
            package = _package(imported)
            if package in PACKAGE_ORDER and PACKAGE_ORDER.index(package) > level:
                violations.append(f"{name} ({_package(name)}) imports {imported} ({package}) at module level")
    assert not violations, "import it inside the function that needs it, or move it:\n" + "\n".join(violations)


def test_module_level_imports_are_acyclic() -> None:
    modules = _modules()
    graph = {name: {i for i in imports.module_level if i in modules and i != name} for name, imports in modules.items()}
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in done:
            return
        assert name not in visiting, "import cycle: " + " -> ".join([*path, name])
        visiting.add(name)
        for child in sorted(graph[name]):
            visit(child, [*path, name])
        visiting.discard(name)
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_the_import_walk_tells_lazy_imports_apart() -> None:
    imports = _imports(PACKAGE / "cli" / "main.py")
    assert "spark.command" in imports.lazy and "spark.command" not in imports.module_level
    assert "coordinator.config.settings" in imports.module_level


def test_the_layer_check_finds_an_upward_and_a_sideways_import(tmp_path: Path) -> None:
    """The check above can fail: a domain module importing the node, or another domain package, is reported."""
    module = tmp_path / "rules.py"
    module.write_text("from coordinator.node.router import Router\nfrom coordinator.files import ownership\n")
    violations = _layer_violations({"coordinator.commits.rules": _imports(module)})
    assert any("coordinator.node.router (node, a higher layer)" in v for v in violations), violations
    assert any("coordinator.files (files, a package of the same layer)" in v for v in violations), violations
