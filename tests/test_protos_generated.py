"""The committed generated modules are exactly what the pinned generator makes from the .proto sources."""

from __future__ import annotations

import filecmp
from pathlib import Path

from protos import generate
from protos import records_pb2 as rec

PROTOS = Path(generate.__file__).resolve().parent


def test_generated_modules_match_the_proto_sources(tmp_path: Path) -> None:
    generate.generate(tmp_path)
    produced = sorted(p.name for p in (tmp_path / "protos").iterdir())
    generated = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
    committed = sorted(p.name for p in PROTOS.iterdir() if p.name.endswith(generated))
    assert produced == committed
    stale = [name for name in produced if not filecmp.cmp(tmp_path / "protos" / name, PROTOS / name, shallow=False)]
    assert not stale, f"regenerate with `python -m protos.generate`: {stale} differ"


def test_contract_is_the_shared_spec_plus_additions_only() -> None:
    """Every field of the shared contract keeps its name, number and type (additions allowed)."""
    shared = PROTOS.parent.parent / "shared" / "spec" / "coordinator.proto"  # shared/ lies beside the checkout
    assert shared.exists(), f"the shared contract is missing at {shared}"
    ours = (PROTOS / "coordinator.proto").read_text()
    for line in shared.read_text().splitlines():
        stripped = line.split("//")[0].strip()
        if stripped.endswith(";") and "=" in stripped:
            assert stripped in ours, f"changed or missing in protos/coordinator.proto: {stripped}"


def test_file_committed_packs_batches_in_the_documented_layout() -> None:
    from coordinator import records

    batch = records.CommittedBatch(7, 3, 100, 50, 10, 19, 1234, 42, 1, 5, 14, 2, 1)
    record = records.file_committed(0, "k", 200, 1, [0], 99, [batch])
    parsed = rec.MetadataRecord.FromString(record.SerializeToString())
    assert records.unpack_batches(parsed.file_committed.packed_batches) == [batch]
    assert records.BATCH_LAYOUT.size == len(parsed.file_committed.packed_batches)
