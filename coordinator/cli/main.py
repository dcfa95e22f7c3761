"""`diskless`: the operator's command (DESIGN §9).

`orphan-scan`, `consolidate` and `bench` are other packages' commands with parsers of their own: this parser hands
them the rest of the command line, and imports them only when one runs (spark/ and bench/ build on
coordinator/, never the other way at import time; and `diskless --help` needs neither Spark nor the
bench extra).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from coordinator.cli.parsers import add_operator_commands
from coordinator.config.loading import load_settings
from coordinator.config.settings import SettingsError, describe_settings
from coordinator.edge.acl_file import AclError


def _serve(args: argparse.Namespace) -> int:
    import uvloop

    from coordinator.base.logging_output import configure_logging
    from coordinator.node.assembly import serve

    try:
        settings = load_settings(
            args.config,
            {
                "diskless.data.dir": args.data_dir,
                "diskless.listen": args.listen,
                "diskless.metadata.topic.num.partitions": args.coordinators,
                "diskless.allow.plaintext": True if args.allow_plaintext else None,
                "diskless.log.format": args.log_format,
                "diskless.node.id": args.node_id,
                "diskless.cluster.etcd.endpoints": args.etcd,
                "diskless.advertise": args.advertise,
                "diskless.node.processes": args.processes,
            },
        )
    except (SettingsError, OSError) as error:
        print(f"diskless serve: {error}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(serve(settings))
    except (SettingsError, AclError, OSError) as error:
        print(f"diskless serve: {error}", file=sys.stderr)
        return 2


def _settings(args: argparse.Namespace) -> int:
    rows = describe_settings()
    if args.markdown:
        print("| setting | default | meaning |\n|---|---|---|")
        for name, default, doc in rows:
            print(f"| `{name}` | `{default}` | {doc} |")
    else:
        for name, default, doc in rows:
            print(f"{name}={default}\n    {doc}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="diskless", description="The Diskless coordinator of Kafka's diskless topics."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run one node hosting coordinators 0..N-1 (or one node of a cluster)")
    serve.add_argument("--data-dir", type=Path, help="where the coordinators keep their data (default ./data)")
    serve.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:50051)")
    serve.add_argument("--coordinators", type=int, help="coordinators on this node (default 8)")
    serve.add_argument("--config", type=Path, help="a properties file of settings (see `diskless settings`)")
    serve.add_argument(
        "--allow-plaintext", action="store_true", help="serve without TLS on a non-loopback address (not advised)"
    )
    serve.add_argument("--log-format", choices=("text", "json"), help="log lines as text (default) or JSON objects")
    serve.add_argument("--node-id", type=int, help="this node's id in a cluster (default 0)")
    serve.add_argument(
        "--etcd", help="HOST:PORT[,HOST:PORT...] of etcd: join a cluster of nodes (DESIGN §6a); without it, one node"
    )
    serve.add_argument("--advertise", help="HOST:PORT other nodes and brokers reach this node at (default: --listen)")
    serve.add_argument(
        "--processes",
        type=int,
        help="commit processes the coordinators are spread over, one per core (diskless.node.processes; default 1)",
    )
    serve.set_defaults(run=_serve)
    settings = commands.add_parser("settings", help="list every setting with its default and meaning")
    settings.add_argument("--markdown", action="store_true", help="as a Markdown table")
    settings.set_defaults(run=_settings)
    add_operator_commands(commands)
    handed_over = (
        ("orphan-scan", "find WAL files no coordinator knows (PySpark); --delete removes them", _orphan_scan),
        (
            "consolidate",
            "merge small WAL files into per-partition objects (PySpark); --dry-run changes nothing",
            _consolidate,
        ),
        ("bench", "benchmarks: `diskless bench run [--quick] [--out DIR]`, `diskless bench compare REV`", _bench),
    )
    for name, help_text, run in handed_over:
        # No options of its own (not even -h): everything after the name goes to the command's parser.
        command = commands.add_parser(name, help=help_text, add_help=False)
        command.set_defaults(run=run, hands_over=True)
    return parser


def _orphan_scan(args: argparse.Namespace, rest: list[str]) -> int:
    from spark.command import main as orphan_scan

    return orphan_scan(rest, prog="diskless orphan-scan")


def _consolidate(args: argparse.Namespace, rest: list[str]) -> int:
    from spark.consolidation_command import main as consolidate

    return consolidate(rest, prog="diskless consolidate")


def _bench(args: argparse.Namespace, rest: list[str]) -> int:
    from bench.cli import main as bench

    return bench(rest)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "hands_over", False):
        return int(args.run(args, rest))
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return int(args.run(args))
