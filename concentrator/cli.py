"""The ``concentrator`` command. This module is the composition root: it wires protocol, store
and (later) the Spark pipeline together, so it is the one place allowed to import them all."""

from __future__ import annotations

import argparse
import atexit
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from protocol import ServerConfig

if TYPE_CHECKING:
    from flask import Flask


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="concentrator", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP server over a data directory")
    serve.add_argument("--data", type=Path, default=Path("data"),
                       help="data directory: the store and its history (created if missing)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--threads", type=int, default=16, help="concurrent requests")
    serve.add_argument("--max-body-bytes", type=_size, default=None,
                       help="largest accepted RDF upload, e.g. 2g (default: no limit)")
    serve.add_argument("--retention", type=int, default=None,
                       help="keep the history of this many latest revisions (default: all)")
    serve.add_argument("--spark-master", default="local[2]",
                       help="Spark master of the window pipeline: local[N] (embedded, default) or spark://HOST:PORT")
    serve.add_argument("--rules", type=Path, default=None,
                       help="a directory of rules: NAME.rq files whose first line is '# output: <IRI-or-stream-name>'")
    serve.add_argument("--no-pipeline", action="store_true",
                       help="do not start Spark: one-shot windows work, repeating (R…) windows never complete")
    tail = commands.add_parser("tail", help="follow a continuous response (a repeating windowed IRI) in the terminal")
    tail.add_argument("url", help="a stream URL, e.g. http://127.0.0.1:8080/streams/hr")
    tail.add_argument("windows", help="a repeating WindowRef, e.g. R/HEAD/PT05M/PT01M")
    tail.add_argument("--query", help="a SPARQL query evaluated on each window (default: the window dataset)")
    tail.add_argument("--format", help="each window's media type (default: TriG, SPARQL JSON or Turtle)")
    tail.add_argument("--report", help="report policy, e.g. window-close,non-empty (docs/continuous.md)")
    tail.add_argument("--operator", help="rstream (default), istream or dstream")
    replay = commands.add_parser("replay", help="run recorded streams through rules on Spark and write the outputs")
    replay.add_argument("files", type=Path, nargs="+", metavar="FILE",
                        help="a recorded stream (TriG / N-Quads with timestamps); the stream is named by its stem")
    replay.add_argument("--rules", type=Path, required=True, help="a rules directory (as for serve --rules)")
    replay.add_argument("--out", type=Path, required=True, help="where the rules' output streams go (TriG)")
    replay.add_argument("--base", type=Path, help="base data for the dataset (TriG / Turtle / N-Quads)")
    replay.add_argument("--alias", action="append", default=[], metavar="NAME=IRI",
                        help="an IRI that names stream NAME (e.g. the stream ID the base data uses); repeatable")
    replay.add_argument("--spark-master", default="local[2]")
    return parser


def run_replay(args: argparse.Namespace) -> int:
    from concentrator.replay import replay
    from store import StoreError

    aliases: dict[str, list[str]] = {}
    for item in args.alias:
        name, sep, iri = item.partition("=")
        if not sep or not name or not iri:
            print(f"concentrator replay: --alias {item!r}: write NAME=IRI", file=sys.stderr)
            return 2
        aliases.setdefault(name, []).append(iri)
    try:
        summary = replay(args.files, args.rules, args.out, base_data=args.base, aliases=aliases,
                         spark_master=args.spark_master)
    except (OSError, ValueError, TimeoutError, StoreError) as error:
        print(f"concentrator replay: {error}", file=sys.stderr)
        return 1
    outputs = ", ".join(f"{name}: {count}" for name, count in summary.outputs.items()) or "none"
    print(f"replayed {summary.elements:,} elements, {summary.windows:,} windows in {summary.seconds} s; "
          f"output elements written to {args.out}: {outputs}")
    return 0


def tail(args: argparse.Namespace) -> int:
    """Print each window of a continuous response as it completes, under a one-line header."""
    from concentrator.client import ClientError, windows

    try:
        for window in windows(args.url, args.windows, query=args.query, format=args.format, report=args.report,
                              operator=args.operator):
            print(f"# window {window.index} [{window.start}, {window.end}) committed {window.committed}", flush=True)
            sys.stdout.write(window.body.decode("utf-8"))
            if not window.body.endswith(b"\n"):
                sys.stdout.write("\n")
            sys.stdout.flush()
    except ClientError as error:
        print(f"concentrator tail: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def build_app(config: ServerConfig, spark_master: str | None, rules_dir: Path | None = None,
              base_url: str = "") -> Flask:
    """The server's parts: the dataset, the streams, the window pipeline (on Spark), the HTTP app."""
    import requests

    from concentrator.rules import RuleRunner
    from protocol import create_app
    from store import RevisionedDataset
    from store.evaluation import ExtendedEvaluator
    from store.rules import RuleRegistry
    from store.streams import StreamCatalog

    dataset = RevisionedDataset(config.data_dir, in_memory=config.in_memory, retention=config.retention)
    catalog = StreamCatalog(config.data_dir / "streams", in_memory=config.in_memory)
    evaluator = ExtendedEvaluator(dataset, catalog, [], requests.Session())
    registry = RuleRegistry(config.data_dir / "rules", evaluator)
    if rules_dir is not None:
        for error in registry.load_directory(rules_dir, base_url):
            print(f"concentrator: rule not loaded: {error}", file=sys.stderr)
    runner = RuleRunner(registry, evaluator)
    pipeline_status = None
    if spark_master is not None:
        from concentrator.pipeline import WindowPipeline
        from concentrator.spark import SparkSettings

        pipeline = WindowPipeline(catalog, config.data_dir, SparkSettings(master=spark_master))
        pipeline.on_windows.append(runner.on_windows)
        pipeline.start_in_background()  # Spark takes seconds to start; requests are answered meanwhile
        atexit.register(pipeline.stop, stop_session=True)
        pipeline_status = pipeline.status
    atexit.register(catalog.close)
    return create_app(config, dataset, catalog, pipeline_status, registry, evaluator)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        from concentrator.server import serve

        config = ServerConfig(args.data.resolve(), max_body_bytes=args.max_body_bytes,
                              retention=args.retention)
        master = None if args.no_pipeline else args.spark_master
        serve(config, args.host, args.port, args.threads, make_app=partial(
            build_app, spark_master=master, rules_dir=args.rules, base_url=f"http://{args.host}:{args.port}"))
    elif args.command == "tail":
        return tail(args)
    elif args.command == "replay":
        return run_replay(args)
    return 0
