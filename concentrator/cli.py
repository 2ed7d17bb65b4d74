"""The ``concentrator`` command: ``serve`` (the HTTP server over a data directory, with the Spark window pipeline
and rules: ``concentrator.compose`` wires the parts), ``tail`` (follow a continuous response in a terminal),
``upload`` (a recorded stream sent element by element, with a progress bar, resuming after a dropped connection) and
``replay`` (recorded streams through rules, offline)."""

from __future__ import annotations

import argparse
import atexit
import errno
import importlib.util
import ipaddress
import os
import shlex
import socket
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from concentrator.tail import is_http_url, os_reason, tail
from engine.budget import DEFAULT_PER_CLIENT, DEFAULT_PROCESSES, DEFAULT_QUEUE, DEFAULT_TIMEOUT
from protocol import ServerConfig
from rules.tasks import PLACEMENTS
from store.limits import BODY_LIMIT

if TYPE_CHECKING:
    from flask import Flask

    from concentrator.compose import Broker
    from concentrator.upload import Progress
    from rules.tasks import Placement


def _spark_conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("spark."):
        raise argparse.ArgumentTypeError(f"{text!r}: write spark.KEY=VALUE")
    return key, value


def _rules_folder(text: str) -> Path:
    """``--rules``: a folder that exists (a typo would otherwise start a server, or a replay, with no rules)."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text}: no such folder (give a folder of NAME.rq rule files)")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder: give the folder of NAME.rq rule files "
                                         "it is in")
    return path


def _warn_if_no_rules(command: str, rules: Path | None) -> None:
    if rules is not None and not any(rules.glob("*.rq")):
        print(f"concentrator {command}: warning: the rules folder {rules} holds no NAME.rq file: no rule will fire",
              file=sys.stderr)


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds, more than 0 and at most 3600")
    return value


def _broker(text: str) -> Broker:
    """``--mqtt``: a broker URL (connectors.broker)."""
    from concentrator.compose import mqtt_broker
    from sparql_ext.errors import ConcentratorError

    try:
        return mqtt_broker(text)
    except ConcentratorError as error:
        raise argparse.ArgumentTypeError(error.message) from None


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of at least 1")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: give a TCP port, from 1 to 65535")
    return int(text)


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number (0 or more)")
    return int(text)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def address_unavailable(host: str, port: int) -> str | None:
    """Why the server could not listen on ``host:port`` (None: it can), found before anything starts: gunicorn
    would retry for seconds and print each failure."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        return f"{host!r} is not an address of this machine ({error.strerror})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return f"port {port} is in use (another server, or an earlier one still running); give --port"
            return error.strerror or str(error)
    return None


def own_base_urls(host: str, port: int) -> tuple[str, ...]:
    """The URLs this server answers at: its address, and its loopback names when it listens on loopback or on every
    address (a SERVICE to any of them is evaluated in-process, never over HTTP)."""
    names = [f"[{host}]" if ":" in host else host]
    if _is_loopback(host) or host in ("0.0.0.0", "::"):
        names += ["127.0.0.1", "localhost", "[::1]"]
    return tuple(dict.fromkeys(f"http://{name}:{port}" for name in names))


def service_allowlist(given: list[str], host: str, port: int) -> tuple[str, ...] | None:
    """The hosts SERVICE may reach: this server (under its loopback names too) and those given; '*': any."""
    if "*" in given:
        return None
    own = {f"{host}:{port}"} | ({f"127.0.0.1:{port}", f"localhost:{port}"} if _is_loopback(host) else set())
    return tuple(sorted(own | {item.lower() for item in given}))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="concentrator", description="An RDF stream concentrator: a SPARQL 1.1 Graph Store with revisions, streams "
        "and windows, rules fired on every window (docs/ in the repository).",
        epilog="Each command has its own --help, e.g. concentrator serve --help.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP server over a data directory")
    serve.add_argument("--data", type=Path, default=Path("data"),
                       help="data directory: the store and its history (created if missing)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=8080)
    serve.add_argument("--threads", type=int, default=16,
                       help="concurrent requests (each continuous response and upload holds one while it lasts)")
    serve.add_argument("--header-timeout", type=_seconds, default=10.0, metavar="SECONDS",
                       help="a request's headers must arrive within this time, else 408 (default 10)")
    serve.add_argument("--body-timeout", type=_seconds, default=30.0, metavar="SECONDS",
                       help="a request body up to 256 KiB must arrive within this time after its headers, and a "
                            "longer one (an upload) may not pause for longer, else 408 (default 30)")
    serve.add_argument("--max-body-bytes", type=_size, default=BODY_LIMIT,
                       help="largest Graph Store Protocol body, as sent and as N-Quads, e.g. 2g (default 1g; 0: none)")
    serve.add_argument("--framing-processes", type=_count, default=min(2, os.cpu_count() or 1), metavar="N",
                       help="processes that parse and write the large segments of uploads, beside the request "
                            "threads (default: 2, or 1 on one core; 0: in the request threads)")
    serve.add_argument("--retention", type=int, default=None,
                       help="keep the history of this many latest revisions (default: all)")
    serve.add_argument("--spark-master", default="local[2]",
                       help="Spark master of the window pipeline: local[N] (embedded, default) or spark://HOST:PORT")
    serve.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", type=_spark_conf,
                       help="a Spark setting for the session (repeatable), e.g. spark.executor.memory=2g")
    serve.add_argument("--rules-on", choices=PLACEMENTS, default="auto",
                       help="where rule firings are evaluated: auto (Spark executors with a cluster master, the driver "
                            "in local mode), driver, or executors (docs/deployment.md)")
    serve.add_argument("--rules", type=_rules_folder, default=None,
                       help="a folder of rules: NAME.rq files whose first line is '# output: <IRI-or-stream-name>'")
    serve.add_argument("--no-pipeline", action="store_true",
                       help="do not start Spark: one-shot windows work, repeating (R…) windows never complete")
    serve.add_argument("--token", default=os.environ.get("CONCENTRATOR_TOKEN"),
                       help="writes need 'Authorization: Bearer TOKEN' (default: $CONCENTRATOR_TOKEN); required "
                            "when --host is not a loopback address")
    serve.add_argument("--read-token", action="append", default=[], metavar="TOKEN",
                       help="reads need 'Authorization: Bearer TOKEN' with this token or the write token (repeatable; "
                            "also $CONCENTRATOR_READ_TOKEN); streams marked public=true stay open (docs/access.md)")
    serve.add_argument("--public", action="store_true",
                       help="reads are open to anyone, on purpose: needed, or a --read-token, when --host is not a "
                            "loopback address")
    serve.add_argument("--cors", action="append", default=[], metavar="ORIGIN",
                       help="an origin whose pages may call this server from a browser, e.g. https://yasgui.example "
                            "(repeatable; '*' for any, never with credentials); default: none")
    serve.add_argument("--read-only", action="store_true", help="refuse every write (403)")
    serve.add_argument("--rate-limit", type=float, default=None,
                       help="requests per second per client address; beyond it 429 (default: no limit)")
    serve.add_argument("--sequences-per-client", type=_count, default=64, metavar="N",
                       help="window sequences a client without the write token may have registered by its reads "
                            "(continuous responses, answer=latest, SERVICE); beyond it 429 (default 64)")
    serve.add_argument("--query-timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                       help="a query's budget: past it, it is stopped and answered 503; a request's timeout= may "
                            f"lower it (default {DEFAULT_TIMEOUT:g})")
    serve.add_argument("--query-processes", type=_count, default=DEFAULT_PROCESSES, metavar="N",
                       help="worker processes evaluating plain queries, killed when a query passes its budget "
                            f"(default: twice the CPUs, here {DEFAULT_PROCESSES}; 0: in the request threads, where "
                            "only the writing of a result can be stopped)")
    serve.add_argument("--queries-per-client", type=_positive, default=DEFAULT_PER_CLIENT, metavar="N",
                       help="queries a client (its address, or the write token) may have running or waiting; "
                            f"beyond it 429 (default {DEFAULT_PER_CLIENT})")
    serve.add_argument("--query-queue", type=_count, default=DEFAULT_QUEUE, metavar="N",
                       help="queries that may wait for a busy query process; beyond it 503 (default "
                            f"{DEFAULT_QUEUE})")
    serve.add_argument("--service-allow", action="append", default=[], metavar="HOST[:PORT]",
                       help="a host SERVICE (in queries and rules) may reach over HTTP; repeatable; '*' for any "
                            "(default: only this server)")
    serve.add_argument("--mqtt", type=_broker, default=None, metavar="URL",
                       help="an MQTT broker, mqtt://[USER[:PASSWORD]@]HOST[:PORT] (mqtts:// for TLS): streams with "
                            "mqtt-topic settings are fed from it, publications publish to it (docs/connectors.md)")
    tail = commands.add_parser("tail", help="follow a continuous response (a repeating windowed IRI) in the terminal")
    tail.add_argument("url", help="a stream URL, e.g. http://127.0.0.1:8080/streams/hr")
    tail.add_argument("windows", help="a repeating WindowRef, e.g. R/HEAD/PT05M/PT01M")
    tail.add_argument("--query", help="a SPARQL query evaluated on each window (default: the window dataset)")
    tail.add_argument("--format", help="each window's media type (default: TriG, SPARQL JSON or Turtle)")
    tail.add_argument("--report", help="report policy, e.g. window-close,non-empty (docs/continuous.md)")
    tail.add_argument("--operator", help="rstream (default), istream or dstream")
    send = commands.add_parser("upload", help="upload a recorded stream (TriG / N-Quads) element by element, with a "
                               "progress bar, resuming after a dropped connection")
    send.add_argument("file", type=Path, help="a TriG or N-Quads file of stream elements (.trig, .nq)")
    send.add_argument("url", help="the stream's URL, e.g. http://127.0.0.1:8080/streams/hr")
    send.add_argument("--format", choices=("trig", "nquads"), help="the file's format (default: from its extension)")
    send.add_argument("--create", action="store_true", help="create the stream first if it does not exist")
    send.add_argument("--token", default=os.environ.get("CONCENTRATOR_TOKEN"),
                      help="the write token (default: $CONCENTRATOR_TOKEN)")
    send.add_argument("--batch", type=_positive, default=1000, metavar="N",
                      help="elements per request; a dropped connection re-sends at most one batch (default 1000)")
    send.add_argument("--give-up", type=_seconds, default=120.0, metavar="SECONDS",
                      help="how long to wait for a server that went away before failing (default 120)")
    register = commands.add_parser("register", help="register an RSP-QL or C-SPARQL query file (docs/rsp-ql.md)")
    register.add_argument("file", type=Path, help="the registration (.rspql, .csparql)")
    register.add_argument("url", help="the server (the query is named after the file) or the query's URL "
                          "(…/queries/NAME)")
    register.add_argument("--report", help="report policy (default window-close,non-empty-content)")
    register.add_argument("--operator", help="rstream, istream or dstream (default: the text's, else rstream)")
    register.add_argument("--t0", help="an xsd:dateTime where the first window starts (default: the epoch's grid)")
    register.add_argument("--token", default=os.environ.get("CONCENTRATOR_TOKEN"),
                          help="the write token (default: $CONCENTRATOR_TOKEN)")
    replay = commands.add_parser("replay", help="run recorded streams through rules on Spark and write the outputs")
    replay.add_argument("files", type=Path, nargs="+", metavar="FILE",
                        help="a recorded stream (TriG / N-Quads with timestamps); the stream is named by its stem")
    replay.add_argument("--rules", type=_rules_folder, required=True, help="a rules folder (as for serve --rules)")
    replay.add_argument("--out", type=Path, required=True, help="where the rules' output streams go (TriG)")
    replay.add_argument("--base", type=Path, help="base data for the dataset (TriG / Turtle / N-Quads)")
    replay.add_argument("--alias", action="append", default=[], metavar="NAME=IRI",
                        help="an IRI that names stream NAME (e.g. the stream ID the base data uses); repeatable")
    replay.add_argument("--spark-master", default="local[2]")
    replay.add_argument("--rules-on", choices=PLACEMENTS, default="auto", help="as for serve")
    return parser


def run_replay(args: argparse.Namespace) -> int:
    from concentrator.replay import replay
    from sparql_ext.errors import ConcentratorError

    aliases: dict[str, list[str]] = {}
    for item in args.alias:
        name, sep, iri = item.partition("=")
        if not sep or not name or not iri:
            print(f"concentrator replay: --alias {item!r}: write NAME=IRI", file=sys.stderr)
            return 2
        aliases.setdefault(name, []).append(iri)
    try:
        summary = replay(args.files, args.rules, args.out, base_data=args.base, aliases=aliases,
                         spark_master=args.spark_master, rules_on=args.rules_on, progress=sys.stderr.isatty())
    except (OSError, ValueError, TimeoutError, ConcentratorError) as error:
        print(f"concentrator replay: {error}", file=sys.stderr)
        return 1
    outputs = ", ".join(f"{name}: {count}" for name, count in summary.outputs.items()) or "none"
    print(f"replayed {summary.elements:,} elements, {summary.windows:,} windows in {summary.seconds} s; "
          f"output elements written to {args.out}: {outputs}")
    return 0


def run_upload(args: argparse.Namespace) -> int:
    """``concentrator upload FILE URL``: exit 0 when every element is committed, 1 when the server refused or stayed
    away (how many were committed is said), 2 for a bad command line or an unreadable file."""
    import requests

    from concentrator.upload import UploadInterrupted, UploadProblem, rdf_format_of, upload_file

    def fail(message: str, code: int) -> int:
        print(f"concentrator upload: {' '.join(message.split())}", file=sys.stderr)  # one line
        return code

    if not is_http_url(args.url):
        return fail(f"{args.url!r} is not an http:// or https:// stream URL, e.g. http://127.0.0.1:8080/streams/hr", 2)
    if not args.file.is_file():
        return fail(f"{args.file}: no such file", 2)
    try:
        rdf_format = rdf_format_of(args.file, args.format)
    except UploadProblem as problem:
        return fail(str(problem), 2)
    server = "{0.scheme}://{0.netloc}".format(urlsplit(args.url))
    session = requests.Session()
    if args.token:
        session.headers["Authorization"] = f"Bearer {args.token}"
    bar = _ProgressBar(args.file)
    try:
        summary = upload_file(args.file, args.url, rdf_format=rdf_format, session=session, batch=args.batch,
                              give_up=args.give_up, create=args.create, on_progress=bar)
    except UploadProblem as problem:
        bar.close()
        committed = "" if problem.committed is None else \
            f" ({problem.committed:,} element(s) of {args.file} were committed before it)"
        return fail(f"{problem}{committed}", 1)
    except requests.ConnectionError as error:
        bar.close()
        return fail(f"no server answers at {server}: is it running? ({os_reason(error)})", 1)
    except requests.RequestException as error:
        bar.close()
        return fail(f"the request to {server} failed: {os_reason(error)}", 1)
    except UploadInterrupted as interrupted:
        bar.close()
        return fail(f"interrupted: {interrupted.committed:,} element(s) of {args.file} are committed (the stream's "
                    f"HEAD is ordinal {interrupted.head}); run the same command again to continue after them "
                    f"(concentrator upload {shlex.quote(str(args.file))} {shlex.quote(args.url)} …)", 130)
    except KeyboardInterrupt:  # before the stream was reached
        bar.close()
        return fail("interrupted before anything was sent", 130)
    bar.close()
    span = f" (ordinals {summary.first_ordinal}–{summary.last_ordinal})" if summary.first_ordinal is not None else ""
    rate = summary.elements / summary.seconds if summary.seconds else 0.0
    skipped = f"; {summary.skipped:,} earlier element(s) of it were already in the stream" if summary.skipped else ""
    print(f"{summary.elements:,} element(s) of {args.file} committed to {args.url}{span} in {summary.seconds:g} s "
          f"({rate:,.0f} elements/s){skipped}; HEAD is ordinal {summary.head}, stream time {summary.stream_time}")
    return 0


class _ProgressBar:
    """The upload's progress on a terminal (stderr): the file framed, elements committed, their rate, the time left
    (tqdm, by bytes of the file); nothing when stderr is not a terminal."""

    def __init__(self, path: Path) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=path.stat().st_size, unit="B", unit_scale=True, file=sys.stderr, leave=True,
                         disable=not sys.stderr.isatty(), desc=path.name,
                         bar_format="{desc}: {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt} "
                                    "[{elapsed}, ETA {remaining}]{postfix}")

    def __call__(self, progress: Progress) -> None:
        self._bar.set_postfix_str(f"{progress.committed:,} elements committed ({progress.rate:,.0f}/s), "
                                  f"{progress.sent - progress.committed:,} in flight", refresh=False)
        self._bar.update(progress.read - self._bar.n)

    def close(self) -> None:
        self._bar.close()


def build_app(config: ServerConfig, spark_master: str | None, rules_dir: Path | None = None,
              base_url: str = "", rules_on: Placement = "auto", spark_conf: dict[str, str] | None = None,
              mqtt: Broker | None = None) -> Flask:
    """The server (``concentrator.compose.assemble``) and its HTTP app; called in gunicorn's worker process."""
    from concentrator.compose import assemble
    from protocol import create_app

    server = assemble(config, spark_master=spark_master, rules_dir=rules_dir, base_url=base_url, rules_on=rules_on,
                      spark_conf=spark_conf, mqtt=mqtt)
    for error in server.rule_errors:
        print(f"concentrator: rule not loaded: {error}", file=sys.stderr)
    server.start()
    atexit.register(server.close)
    return create_app(config, server.services)


def _main_as_module() -> None:
    """Name the main module ``concentrator.__main__`` when it is the ``concentrator`` console script, as
    ``python -m concentrator`` does. Each query process (``engine.workers``, a multiprocessing fork server's child)
    imports the main module again unless it has such a name, and the script imports the whole HTTP app: measured
    ≈ 320 ms and ≈ 36 MB more per process."""
    main = sys.modules["__main__"]
    if getattr(main, "__spec__", None) is None:
        main.__spec__ = importlib.util.find_spec("concentrator.__main__")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("serve", "replay"):
        _warn_if_no_rules(args.command, args.rules)
    if args.command == "serve":
        from concentrator.server import serve

        if args.token is None and not _is_loopback(args.host):
            print(f"concentrator serve: --host {args.host} is reachable from other machines: give a write token "
                  "(--token or $CONCENTRATOR_TOKEN), or bind to 127.0.0.1", file=sys.stderr)
            return 2
        read_tokens = tuple(args.read_token) + tuple(
            token for token in [os.environ.get("CONCENTRATOR_READ_TOKEN")] if token and not args.read_token)
        if args.public and read_tokens:
            print("concentrator serve: --public opens every read, --read-token protects them: give one of them",
                  file=sys.stderr)
            return 2
        if not (read_tokens or args.public) and not _is_loopback(args.host):
            print(f"concentrator serve: --host {args.host} is reachable from other machines: give a read token "
                  "(--read-token or $CONCENTRATOR_READ_TOKEN), or --public to let anyone read", file=sys.stderr)
            return 2
        unavailable = address_unavailable(args.host, args.port)
        if unavailable is not None:
            print(f"concentrator serve: cannot listen on {args.host}:{args.port}: {unavailable}", file=sys.stderr)
            return 1
        config = ServerConfig(args.data.resolve(), max_body_bytes=args.max_body_bytes or None,
                              retention=args.retention, token=args.token, read_only=args.read_only,
                              rate_limit=args.rate_limit, framing_processes=args.framing_processes,
                              sequences_per_client=args.sequences_per_client,
                              query_timeout=args.query_timeout, query_processes=args.query_processes,
                              queries_per_client=args.queries_per_client, query_queue=args.query_queue,
                              request_threads=args.threads, read_tokens=read_tokens, public=args.public,
                              cors_origins=tuple(args.cors),
                              base_urls=own_base_urls(args.host, args.port),
                              service_allow=service_allowlist(args.service_allow, args.host, args.port))
        master = None if args.no_pipeline else args.spark_master
        _main_as_module()
        serve(config, args.host, args.port, args.threads, args.header_timeout, body_timeout=args.body_timeout,
              make_app=partial(
            build_app, spark_master=master, rules_dir=args.rules, base_url=f"http://{args.host}:{args.port}",
            rules_on=args.rules_on, spark_conf=dict(args.spark_conf), mqtt=args.mqtt))
    elif args.command == "tail":
        return tail(args)
    elif args.command == "replay":
        return run_replay(args)
    elif args.command == "upload":
        return run_upload(args)
    elif args.command == "register":
        from concentrator.register import run_register
        return run_register(args)
    return 0
