"""`diskless`: the operator's command (DESIGN §9)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from coordinator.acl import AclError
from coordinator.commands import add_operator_commands
from coordinator.settings import SettingsError, describe_settings, load_settings
from spark.command import add_orphan_scan_command


def _serve(args: argparse.Namespace) -> int:
    import uvloop

    from coordinator.logs import configure_logging
    from coordinator.server import serve

    try:
        settings = load_settings(
            args.config,
            {
                "diskless.data.dir": args.data_dir,
                "diskless.listen": args.listen,
                "diskless.metadata.topic.num.partitions": args.coordinators,
                "diskless.allow.plaintext": True if args.allow_plaintext else None,
                "diskless.log.format": args.log_format,
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
    serve = commands.add_parser("serve", help="run one node hosting coordinators 0..N-1")
    serve.add_argument("--data-dir", type=Path, help="where the coordinators keep their data (default ./data)")
    serve.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:50051)")
    serve.add_argument("--coordinators", type=int, help="coordinators on this node (default 8)")
    serve.add_argument("--config", type=Path, help="a properties file of settings (see `diskless settings`)")
    serve.add_argument(
        "--allow-plaintext", action="store_true", help="serve without TLS on a non-loopback address (not advised)"
    )
    serve.add_argument("--log-format", choices=("text", "json"), help="log lines as text (default) or JSON objects")
    serve.set_defaults(run=_serve)
    settings = commands.add_parser("settings", help="list every setting with its default and meaning")
    settings.add_argument("--markdown", action="store_true", help="as a Markdown table")
    settings.set_defaults(run=_settings)
    add_operator_commands(commands)
    add_orphan_scan_command(commands)
    from bench.cli import add_bench_commands  # light: the harness's own imports wait for `bench run`

    add_bench_commands(commands.add_parser("bench", help="benchmarks: `diskless bench run [--quick] [--out DIR]`"))
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    args = build_parser().parse_args(argv)
    return int(args.run(args))
