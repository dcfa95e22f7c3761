"""Which tables and indexes the WAL frames a node wrote belong to, per transaction shape (issue #38 item 5;
docs/benchmarks.md, "Runs that share source files, committed together").

Reads an strace of the node's processes that shows the first 24 bytes of every pwrite64 (a WAL frame's header is
written on its own: page number, then the database size in pages on a transaction's last frame), e.g.

    strace -f -qq -y -s 24 -x -e trace=pwrite64 -o TRACE -p NODE_PID -p CHILD_PID ...

and maps each frame's page to the table or index that holds that page in the state files as they are afterwards
(SQLite's dbstat; a page freed since counts as "?"). Prints, over every coordinator's state, the frames per
transaction by the set of tables they touched (transactions of more than `--big` frames apart), and the frames per
transaction of each table among the big ones.

    python -m bench.wal_frames TRACE WORK_DIR/a/data
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

import apsw

_WRITE = re.compile(
    r'^\d+\s+pwrite64\(\d+<(?P<path>[^>]*/coordinator-(?P<c>\d+)/state\.sqlite-wal)>, "(?P<head>[^"]*)", 24,'
)
_ALWAYS = {"meta", "?", "sqlite_schema"}  # every transaction's, or none: left out of a transaction's shape


def _page_owners(data_dir: Path) -> dict[int, dict[int, str]]:
    owners: dict[int, dict[int, str]] = {}
    for state in sorted(data_dir.glob("coordinator-*/state.sqlite")):
        connection = apsw.Connection(str(state), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            owners[int(state.parent.name.split("-")[1])] = {
                page: name for name, page in connection.execute("SELECT name, pageno FROM dbstat")
            }
        finally:
            connection.close()
    return owners


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("data_dir", type=Path, help="the node's data directory (coordinator-N/state.sqlite)")
    parser.add_argument("--big", type=int, default=50, help="frames above which a transaction counts as big")
    args = parser.parse_args(argv)
    owners = _page_owners(args.data_dir)
    open_frames: dict[int, list[str]] = collections.defaultdict(list)
    shapes: collections.Counter[str] = collections.Counter()
    shape_frames: collections.Counter[str] = collections.Counter()
    big_tables: collections.Counter[str] = collections.Counter()
    big = 0
    with args.trace.open() as trace:
        for line in trace:
            found = _WRITE.match(line)
            if found is None:
                continue
            coordinator = int(found["c"])
            head = bytes(int(byte, 16) for byte in found["head"].split("\\x")[1:])
            open_frames[coordinator].append(owners.get(coordinator, {}).get(int.from_bytes(head[0:4], "big"), "?"))
            if int.from_bytes(head[4:8], "big") == 0:
                continue  # not a transaction's last frame
            frames = open_frames.pop(coordinator)
            tables = ",".join(sorted(set(frames) - _ALWAYS))
            shape = f"big: {tables}" if len(frames) > args.big else tables
            shapes[shape] += 1
            shape_frames[shape] += len(frames)
            if len(frames) > args.big:
                big += 1
                big_tables.update(frames)
    total = sum(shape_frames.values())
    print(f"{total:,} frames ({total * (4096 + 24) / 1e6:,.1f} MB of 4 KiB pages) in {sum(shapes.values()):,} "
          f"transactions")  # fmt: skip
    for shape, count in shape_frames.most_common(12):
        print(f"{count:9,} {count / total:6.1%}  {shapes[shape]:7,} transactions, {count / shapes[shape]:6.1f} "
              f"frames each: {shape}")  # fmt: skip
    if big:
        print(f"frames per big transaction ({big:,}), by table:")
        for table, count in big_tables.most_common():
            print(f"  {count / big:7.1f}  {table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
