"""Imports go one way: server -> router -> shard -> state/log; the pure core imports no shell."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "coordinator"
# The snapshot package sits at the state/log level: the shard may import it, it never imports the runtime.
PACKAGES = (PACKAGE, PACKAGE.parent / "snapshot")

# A module may import only modules of a lower rank (or its own rank's leaves listed as allowed).
RANKS: dict[str, float] = {
    "coordinator.__main__": 7,
    "coordinator.cli": 6,
    "coordinator.server": 5,
    "coordinator.commands": 5.5,
    "coordinator.admin": 4.5,
    "coordinator.node": 4,
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
    "coordinator.shard.loading": 1.8,
    "coordinator.peers": 1,
    "coordinator.state.replay": 1.5,
    "coordinator.state.store": 1.1,
    "coordinator.state.transaction": 1,
    "coordinator.cluster.etcd_store": 1,  # the cluster metadata in etcd (DESIGN §6a)
    "coordinator.interpreter": 1.05,
    "coordinator.interpreter.kind": 1.02,
    "coordinator.interpreter.files": 1.03,
    "coordinator.interpreter.partitions": 1.03,
    "coordinator.interpreter.leadership": 1.03,
    "coordinator.state.reads": 1,
    "coordinator.log.segments": 1,
    "coordinator.log.recovery": 1.4,  # an operator's repair of a stopped coordinator's log and state
    "coordinator.state.integrity": 1,
    "coordinator.state.opening": 1.6,
    "coordinator.edge": 4.8,
    "snapshot.prune": 1.3,
    "snapshot.snapshots": 1.2,
}
# The functional core: checks and records. They must not touch sockets, disk or SQLite.
PURE_CORE = {
    "coordinator.catalog",
    "coordinator.commits",
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


def _module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(p for p in relative.parts if p != "__init__")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _modules() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for package in PACKAGES for p in package.rglob("*.py")}


def test_no_module_imports_a_higher_layer() -> None:
    modules = _modules()
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
    modules = _modules()
    for name in PURE_CORE:
        shell = {i.split(".")[0] for i in modules[name]} & SHELL_MODULES
        assert not shell, f"{name} imports {shell}: checks and records must stay pure"
        assert not any(
            i.startswith(("coordinator.state", "coordinator.log", "coordinator.shard")) for i in modules[name]
        )


def test_imports_are_acyclic() -> None:
    modules = _modules()
    graph = {name: {i for i in imports if i in modules and i != name} for name, imports in modules.items()}
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in done:
            return
        assert name not in visiting, "import cycle: " + " -> ".join([*path, name])
        visiting.add(name)
        for child in graph[name]:
            visit(child, [*path, name])
        visiting.discard(name)
        done.add(name)

    for name in graph:
        visit(name, [])
