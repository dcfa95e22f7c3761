"""Imports go one way: server -> router -> shard -> state/log; the pure core imports no shell.

Between top-level packages: protos <- snapshot <- coordinator <- spark <- bench (PACKAGE_ORDER), and no module
takes part in an import cycle.

Two kinds of import are told apart. A module-level import (at the top, or under `if` or `try` at
module level, `if TYPE_CHECKING:` included) runs when the module is imported: those must respect
PACKAGE_ORDER and form no cycle. An import inside a function runs when the function does (a lazy
import, e.g. `diskless orphan-scan` importing spark/ only when it runs): it may point anywhere
across packages and may close a cycle, since no module is half-initialised when it runs. Within
coordinator/ and snapshot/, RANKS still applies to both kinds.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "coordinator"
RANKED_PACKAGES = (REPO / "snapshot", PACKAGE)
# Every package with hand-written modules (protos/*_pb2*.py are generated, and import only each other).
ALL_PACKAGES = (REPO / "protos", *RANKED_PACKAGES, REPO / "spark", REPO / "bench")
# Top-level packages, lowest first: a module-level import goes to its own package or one before it.
PACKAGE_ORDER = ("protos", "snapshot", "coordinator", "spark", "bench")

# A module may import only modules of a lower rank (or its own rank's leaves listed as allowed).
RANKS: dict[str, float] = {
    "coordinator.__main__": 7,
    "coordinator.cli": 6,
    "coordinator.server": 5,
    "coordinator.services": 4.95,  # the node's gRPC servicers, handing calls to the gate
    "coordinator.operator_commands": 5.5,
    "coordinator.operator_output": 5.4,
    "coordinator.operator_parsers": 5.6,
    "coordinator.admin_service": 4.5,
    "coordinator.node": 4,
    "coordinator.node_gauges": 4.5,  # the per-coordinator metrics a scrape reads off the node
    # Reader processes: FindBatches off the node's loop; the supervisor runs in the node, the worker apart.
    "coordinator.readers.supervisor": 4.9,
    # A node spread over commit processes: the first process's part beside the node, the plan below everything.
    "coordinator.processes.front": 4.97,
    "coordinator.processes.supervisor": 4.93,
    "coordinator.processes.commit_process": 4.92,
    "coordinator.processes.layout": 1.2,
    "coordinator.child_processes": 1.2,  # restarting and stopping a node's child processes, either kind
    "coordinator.readers.worker": 4.85,
    "coordinator.readers.view": 2.75,
    "coordinator.readers.board": 1,
    "coordinator.readers.counters": 1,
    "coordinator.router": 3,
    # One module per RPC; they share only `routing` (the catalog lookup, admission, running parts).
    "coordinator.operations.topic_admin": 2.8,
    "coordinator.operations.commit_file": 2.8,
    "coordinator.operations.delete_records": 2.8,
    "coordinator.operations.list_offsets": 2.8,
    "coordinator.operations.find_batches": 2.8,
    "coordinator.operations.describe_files": 2.8,
    "coordinator.operations.file_handover": 2.8,
    "coordinator.operations.coordinators": 2.8,
    "coordinator.operations.file_keys": 2.8,
    "coordinator.operations.routing": 2.7,
    "coordinator.fetch": 2,
    "coordinator.offsets": 2,
    "coordinator.file_workers": 2.5,
    # The shard package: a facade over its parts; the pipeline knows the log and state only by Protocols.
    "coordinator.shard": 2,
    "coordinator.shard.facade": 1.95,
    "coordinator.shard.lifecycle": 1.9,
    "coordinator.shard.snapshots": 1.85,
    "coordinator.shard.pipeline": 1.8,
    "coordinator.shard.append_ticks": 1.5,  # one linger timer for every coordinator of a process
    "coordinator.shard.availability": 1.5,  # the lifecycle's states and what each answers callers
    "coordinator.shard.loading": 1.8,
    "coordinator.shard.directory": 1.82,  # its lock and what the next load checks first
    "coordinator.peers": 1,
    "coordinator.state.replay": 1.5,
    "coordinator.state.store": 1.1,
    "coordinator.state.transaction": 1,
    "coordinator.cluster.etcd_store": 1,  # the cluster metadata in etcd (DESIGN §6a)
    "coordinator.cluster.controller": 3.5,  # the node's session, elections and its coordinators' roles
    # Replication of one coordinator's log: used by the shard's lifecycle, built on log, state and interpreter.
    "coordinator.replication.leader": 1.7,
    "coordinator.replication.follower": 1.7,
    "coordinator.replication.snapshot_transfer": 1.7,
    "coordinator.replication.link": 1,
    "coordinator.replication.role": 1,
    "coordinator.interpreter": 1.05,
    "coordinator.interpreter.kind": 1.02,
    "coordinator.interpreter.files": 1.03,
    "coordinator.interpreter.partitions": 1.03,
    "coordinator.interpreter.leadership": 1.03,
    "coordinator.state.reads": 1,
    "coordinator.state.detached_read": 1,
    "coordinator.state.checkpoints": 1,
    "coordinator.log.segments": 1,
    "coordinator.log.recovery": 1.4,  # an operator's repair of a stopped coordinator's log and state
    "coordinator.log.recovery_plan": 1.3,
    "coordinator.log.recovery_report": 1.35,
    "coordinator.state.integrity": 1,
    "coordinator.state.opening": 1.6,
    "coordinator.edge": 4.8,
    "coordinator.edge_loop": 1,  # the gRPC server's own loop, and the hop of a call's work to the node's loop
    "coordinator.state.pruning": 1.3,
    "snapshot.snapshots": 1.2,
}
# The functional core: checks and records. They must not touch sockets, disk or SQLite.
PURE_CORE = {
    "coordinator.catalog",
    "coordinator.commits",
    "coordinator.commit_parts",
    "coordinator.retried_commits",
    "coordinator.partitions",
    "coordinator.producers",
    "coordinator.records",
    "coordinator.view",
    "coordinator.topics",
    "coordinator.topic_rules",
    "coordinator.result",
    "coordinator.wal_files",
    "coordinator.cluster.assignment",
    "coordinator.shard.operation",
    "coordinator.shard.ports",
}
SHELL_MODULES = {"grpc", "apsw", "os", "socket", "asyncio", "sqlite3", "time", "subprocess", "pathlib"}


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


def _modules(packages: tuple[Path, ...] = ALL_PACKAGES) -> dict[str, Imports]:
    return {_module_name(p): _imports(p) for package in packages for p in package.rglob("*.py") if _hand_written(p)}


def _package(module: str) -> str:
    return module.split(".")[0]


def test_no_module_imports_a_higher_layer() -> None:
    modules = {name: imports.every for name, imports in _modules(RANKED_PACKAGES).items()}
    violations = []
    for name, imports in modules.items():
        rank = RANKS.get(name, 0)
        for imported in imports:
            if imported in modules and imported != name and RANKS.get(imported, 0) > rank:
                violations.append(f"{name} (rank {rank}) imports {imported} (rank {RANKS[imported]})")
            elif imported in modules and imported != name and RANKS.get(imported, 0) == rank and rank > 0:
                violations.append(f"{name} imports {imported}, a module of the same layer")
    assert not violations, "\n".join(violations)


def test_pure_core_does_no_io() -> None:
    modules = _modules(RANKED_PACKAGES)
    for name in PURE_CORE:
        imports = modules[name].every
        shell = {i.split(".")[0] for i in imports} & SHELL_MODULES
        assert not shell, f"{name} imports {shell}: checks and records must stay pure"
        assert not any(i.startswith(("coordinator.state", "coordinator.log", "coordinator.shard")) for i in imports)


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
    imports = _imports(PACKAGE / "cli.py")
    assert "spark.command" in imports.lazy and "spark.command" not in imports.module_level
    assert "coordinator.settings" in imports.module_level
