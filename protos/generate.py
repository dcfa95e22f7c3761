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
    """Writes `protos/*_pb2.py`, `*_pb2.pyi` and `*_pb2_grpc.py` under out_dir."""
    from grpc_tools import protoc  # test/dev dependency only

    (out_dir / "protos").mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{REPO_ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(PROTO_DIR / name) for name in SOURCES),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    # records.proto defines no service; its empty _grpc module is noise.
    (out_dir / "protos" / "records_pb2_grpc.py").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO_ROOT, help="output root (default: the repo)")
    generate(parser.parse_args(argv).out)


if __name__ == "__main__":
    main(sys.argv[1:])
