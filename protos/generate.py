"""Regenerates the Python modules of `protos/` from the .proto sources.

Run from anywhere: `python -m protos.generate [--out DIR]`. The generated
modules are committed; `tests/test_protos_generated.py` fails when they
differ from what this script produces.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parent
SOURCES = ("coordinator.proto", "records.proto", "admin.proto", "internal.proto")


def generate(out_dir: Path) -> None:
    """Writes `protos/*_pb2.py`, `*_pb2.pyi`, `*_pb2_grpc.py` and `*_pb2_grpc.pyi` under out_dir."""
    from grpc_tools import protoc  # test/dev dependency only

    # mypy-protobuf's plugin types the service stubs (grpc_tools writes them untyped); it sits beside
    # this interpreter in the virtual environment.
    grpc_stub_plugin = Path(sys.executable).parent / "protoc-gen-mypy_grpc"
    if not grpc_stub_plugin.exists():
        raise SystemExit(f"{grpc_stub_plugin} is missing: install the test extra (mypy-protobuf)")

    (out_dir / "protos").mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{REPO_ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--plugin=protoc-gen-mypy_grpc={grpc_stub_plugin}",
        f"--mypy_grpc_out={out_dir}",
        *(str(PROTO_DIR / name) for name in SOURCES),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    # records.proto defines no service; its empty _grpc modules are noise.
    (out_dir / "protos" / "records_pb2_grpc.py").unlink(missing_ok=True)
    (out_dir / "protos" / "records_pb2_grpc.pyi").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO_ROOT, help="output root (default: the repo)")
    generate(parser.parse_args(argv).out)


if __name__ == "__main__":
    main(sys.argv[1:])
