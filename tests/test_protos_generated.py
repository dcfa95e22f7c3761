"""The committed generated modules are what the pinned generator makes, and the wire contract only grows.

`protos/contract/coordinator.proto` is the wire contract as the team fixed it (a copy kept in the
repository, so that these tests pass in a clone at any path). `protos/coordinator.proto` may add
messages, fields, enum values and RPCs, never rename, renumber or retype one of the contract's.
"""

from __future__ import annotations

import filecmp
import os
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from protos import generate
from protos import records_pb2 as rec

PROTOS = Path(generate.__file__).resolve().parent
CONTRACT = PROTOS / "contract" / "coordinator.proto"
OURS = PROTOS / "coordinator.proto"
# Opt-in: the path of the team's own contract file, to check that the copy above is current.
CONTRACT_SOURCE_VARIABLE = "DISKLESS_CONTRACT_SOURCE"

Entry = tuple[object, ...]


def test_generated_modules_match_the_proto_sources(tmp_path: Path) -> None:
    generate.generate(tmp_path)
    produced = sorted(p.name for p in (tmp_path / "protos").iterdir())
    generated = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
    committed = sorted(p.name for p in PROTOS.iterdir() if p.name.endswith(generated))
    assert produced == committed
    stale = [name for name in produced if not filecmp.cmp(tmp_path / "protos" / name, PROTOS / name, shallow=False)]
    assert not stale, f"regenerate with `python -m protos.generate`: {stale} differ"


def compile_proto(proto: Path, out_dir: Path) -> descriptor_pb2.FileDescriptorProto:
    """The file's descriptor as protoc (the pinned grpcio-tools) builds it."""
    from grpc_tools import protoc

    out = out_dir / f"{proto.stem}-{len(list(out_dir.iterdir()))}.pb"
    arguments = ["grpc_tools.protoc", f"-I{proto.parent}", f"--descriptor_set_out={out}", str(proto)]
    assert protoc.main(arguments) == 0, f"protoc failed on {proto}"
    (file,) = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    return file


def contract_entries(file: descriptor_pb2.FileDescriptorProto) -> dict[str, Entry]:
    """Every name of a .proto file with what a caller relies on: numbers, types, labels, RPC signatures."""
    entries: dict[str, Entry] = {"package": ("package", file.package)}

    def add_enum(scope: str, enum: descriptor_pb2.EnumDescriptorProto) -> None:
        name = f"{scope}{enum.name}"
        entries[name] = ("enum",)
        for value in enum.value:
            entries[f"{name}.{value.name}"] = ("enum value", value.number)

    def add_message(scope: str, message: descriptor_pb2.DescriptorProto) -> None:
        name = f"{scope}{message.name}"
        entries[name] = ("message",)
        for field in message.field:
            kind = descriptor_pb2.FieldDescriptorProto.Type.Name(field.type)
            label = descriptor_pb2.FieldDescriptorProto.Label.Name(field.label)
            entries[f"{name}.{field.name}"] = ("field", field.number, label, kind, field.type_name)
        for enum in message.enum_type:
            add_enum(f"{name}.", enum)
        for nested in message.nested_type:
            add_message(f"{name}.", nested)

    for enum in file.enum_type:
        add_enum("", enum)
    for message in file.message_type:
        add_message("", message)
    for service in file.service:
        entries[service.name] = ("service",)
        for method in service.method:
            signature = (method.input_type, method.output_type, method.client_streaming, method.server_streaming)
            entries[f"{service.name}.{method.name}"] = ("rpc", *signature)
    return entries


def contract_breaks(contract: dict[str, Entry], ours: dict[str, Entry]) -> list[str]:
    """What the contract has that ours lacks or changed (additions are fine)."""
    return [
        f"{name}: the contract has {entry}, protos/coordinator.proto {ours.get(name, 'nothing')}"
        for name, entry in contract.items()
        if ours.get(name) != entry
    ]


def test_contract_is_kept_additions_only(tmp_path: Path) -> None:
    contract = contract_entries(compile_proto(CONTRACT, tmp_path))
    ours = contract_entries(compile_proto(OURS, tmp_path))
    assert len(contract) > 100, "the contract copy looks empty"
    assert contract_breaks(contract, ours) == []
    assert set(ours) > set(contract), "protos/coordinator.proto is expected to add to the contract"


@pytest.mark.parametrize(
    ("original", "changed"),
    [
        ("int32 partition = 4;", "int32 partition = 40;"),  # renumbered
        ("int64 file_size = 3;", "int64 file_bytes = 3;"),  # renamed
        ("int64 file_size = 3;", "int32 file_size = 3;"),  # retyped
        ("repeated int32 owner_ids = 5;", "int32 owner_ids = 5;"),  # no longer repeated
        ("TOPIC_ALREADY_EXISTS = 36;", "TOPIC_ALREADY_EXISTS = 63;"),  # an enum value renumbered
        ("rpc CommitFile(CommitFileRequest)", "rpc CommitFiles(CommitFileRequest)"),  # an RPC renamed
    ],
)
def test_the_contract_check_sees_a_change(tmp_path: Path, original: str, changed: str) -> None:
    text = OURS.read_text()
    assert original in text, original
    tampered = tmp_path / "tampered" / "coordinator.proto"
    tampered.parent.mkdir()
    tampered.write_text(text.replace(original, changed, 1))  # the first: a contract field (later ones may be ours)
    contract = contract_entries(compile_proto(CONTRACT, tmp_path))
    assert contract_breaks(contract, contract_entries(compile_proto(tampered, tmp_path)))


def test_contract_copy_is_current() -> None:
    """Run with DISKLESS_CONTRACT_SOURCE=<the team's coordinator.proto> to check the copy against it."""
    source = os.environ.get(CONTRACT_SOURCE_VARIABLE)
    if not source:
        pytest.skip(f"set {CONTRACT_SOURCE_VARIABLE} to the team's contract file to compare the copy with it")
    assert Path(source).read_bytes() == CONTRACT.read_bytes(), (
        f"protos/contract/coordinator.proto differs from {source}: copy it over (the contract only grows)"
    )


def test_file_committed_packs_batches_in_the_documented_layout() -> None:
    from coordinator.machine import records

    batch = records.CommittedBatch(7, 3, 100, 50, 10, 19, 1234, 42, 1, 5, 14, 2, 1)
    record = records.file_committed(0, "k", 200, 1, [0], 99, [batch])
    parsed = rec.MetadataRecord.FromString(record.SerializeToString())
    assert records.unpack_batches(parsed.file_committed.packed_batches) == [batch]
    assert records.BATCH_LAYOUT.size == len(parsed.file_committed.packed_batches)
