"""The `crawler` command: `crawl` runs a crawl locally, `serve` runs the crawl service,
`testweb` serves the synthetic web, `robots check` says what a robots.txt file allows,
`url normalize` shows what the crawler makes of URLs, `audit` checks a crawl's politeness from
its own request record.

This module owns argument parsing and what the user sees; the work is done by
pipeline.local.runtime and testweb.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import signal
import sys
import time

# The commands that serve the synthetic web. It is a distribution of its own
# (testweb/pyproject.toml) that a checkout installs and the crawler's wheel and image do not.
SYNTHETIC_WEB_COMMANDS = ("testweb", "demo")
# The commands that run a crawl on this machine: the emulators they need are spawned before
# anything else, so that they boot while the command imports Beam (pipeline.local.emulators).
LOCAL_CRAWL_COMMANDS = ("crawl", "demo")
SYNTHETIC_WEB_MISSING = (
    "crawler {command}: the synthetic web (the `testweb` package) is not installed; it is not "
    "part of the crawler's wheel or image. From a checkout of the crawler's repository: "
    "pip install -e ./testweb (or `make demo`, which installs both)")


def has_synthetic_web() -> bool:
    return importlib.util.find_spec("testweb") is not None


def _testweb(args: argparse.Namespace) -> int:
    from testweb.cli import run_testweb

    return run_testweb(args)


def _crawl(args: argparse.Namespace) -> int:
    from pipeline.cli.crawl import run_crawl

    return run_crawl(args)


def _query(args: argparse.Namespace) -> int:
    from pipeline.cli.query import run_query

    return run_query(args)


def _demo(args: argparse.Namespace) -> int:
    from pipeline.cli.demo import run_demo

    return run_demo(args)


def _serve(args: argparse.Namespace) -> int:
    from pipeline.cli.serve import run_serve

    return run_serve(args)


def _add_crawl(sub) -> None:
    from pipeline.options import add_crawl_arguments

    # No abbreviations: --max-pages must not be taken for --max-pages-per-host.
    crawl = sub.add_parser("crawl", allow_abbrev=False,
                           help="crawl from seed URLs on this machine",
                           description="Crawl from seed URLs with Beam's DirectRunner and the "
                                       "Pub/Sub emulator (started for you unless "
                                       "PUBSUB_EMULATOR_HOST is set).")
    add_crawl_arguments(crawl)
    crawl.set_defaults(func=_crawl)


def _add_serve(sub) -> None:
    from pipeline.cli.serve import add_serve_arguments

    serve = sub.add_parser("serve", allow_abbrev=False,
                           help="run the crawl service: the control API and the fleet",
                           description="Serve the control API (bearer tokens from "
                                       "--token-file) with the emulators it needs, started for "
                                       "you unless PUBSUB_EMULATOR_HOST and "
                                       "BIGTABLE_EMULATOR_HOST are set.")
    add_serve_arguments(serve)
    serve.set_defaults(func=_serve)


def _add_testweb(sub) -> None:
    if not has_synthetic_web():
        # Listed in --help still, saying what it needs; main() refuses to run it.
        sub.add_parser("testweb", help="serve the synthetic web on loopback (needs "
                                       "`pip install -e ./testweb` from a checkout)")
        return
    from testweb.cli import add_testweb_arguments

    testweb = sub.add_parser("testweb", help="serve the synthetic web on loopback")
    add_testweb_arguments(testweb)
    testweb.set_defaults(func=_testweb)


def _add_page(sub) -> None:
    from pipeline.io.lookup import add_page_arguments, run_page

    page = sub.add_parser("page", help="print a URL's row from Bigtable (and its text)")
    add_page_arguments(page)
    page.set_defaults(func=run_page)


def _add_status(sub) -> None:
    from pipeline.io.lookup import add_status_arguments, run_status

    status = sub.add_parser("status", help="print a crawl's status and counters from Bigtable")
    add_status_arguments(status)
    status.set_defaults(func=run_status)


def _add_events(sub) -> None:
    from pipeline.io.events import add_events_arguments, run_events

    events = sub.add_parser("events", help="read a crawl's page-crawled events (example "
                                           "downstream consumer)")
    add_events_arguments(events)
    events.set_defaults(func=run_events)


def _add_redrive(sub) -> None:
    from pipeline.io.redrive import add_redrive_arguments, run_redrive

    redrive = sub.add_parser("redrive", help="send a crawl's dead letters back to be parsed "
                                             "again after a fix")
    add_redrive_arguments(redrive)
    redrive.set_defaults(func=run_redrive)


def _add_robots(sub) -> None:
    from pipeline.cli.robots import add_robots_arguments

    robots = sub.add_parser("robots", help="robots.txt tools: `robots check` says which URLs "
                                           "a robots.txt file allows")
    add_robots_arguments(robots)


def _add_query(sub) -> None:
    from pipeline.cli.query import add_query_arguments

    query = sub.add_parser("query", help="run SQL over a crawl's `pages` table (DuckDB)")
    add_query_arguments(query)
    query.set_defaults(func=_query)


def _add_audit(sub) -> None:
    from pipeline.cli.audit import add_audit_arguments, run_audit

    audit = sub.add_parser("audit", help="check a crawl's politeness from its own request "
                                         "record (delays, robots.txt, requests in flight)")
    add_audit_arguments(audit)
    audit.set_defaults(func=run_audit)


def _add_url(sub) -> None:
    from pipeline.cli.url import add_url_arguments

    url = sub.add_parser("url", help="what the crawler makes of URLs (`url normalize`)")
    add_url_arguments(url)


def _add_demo(sub) -> None:
    demo = sub.add_parser("demo", help="serve the synthetic web and crawl it (no internet needed)")
    demo.add_argument("--hosts", type=int, default=50, help="virtual hosts (default: %(default)s)")
    demo.add_argument("--pages-per-host", type=int, default=20,
                      help="pages per host (default: %(default)s)")
    demo.add_argument("--out", default="crawl-out", help="output root (default: %(default)s)")
    demo.add_argument("--min-delay", type=float, default=0.5,
                      help="seconds between requests to one host (default: %(default)s)")
    demo.set_defaults(func=_demo)


# Each command's arguments are added by its own function, which imports what the command
# needs: `crawler url normalize` and `crawler robots check` are called once per input by
# conformance scripts, and should not pay for importing Beam (1.5 s) to parse their arguments.
COMMANDS = {
    "crawl": _add_crawl, "serve": _add_serve, "testweb": _add_testweb, "page": _add_page,
    "status": _add_status, "events": _add_events, "redrive": _add_redrive,
    "robots": _add_robots, "query": _add_query, "url": _add_url, "demo": _add_demo,
    "audit": _add_audit,
}


def build_parser(commands: list[str] | None = None) -> argparse.ArgumentParser:
    """The `crawler` parser with every command, or only `commands` (faster to build)."""
    parser = argparse.ArgumentParser(
        prog="crawler",
        description="A polite web crawler as an Apache Beam streaming pipeline.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in commands or COMMANDS:
        COMMANDS[name](sub)
    return parser


def _stop_on_sigterm(signum, frame) -> None:
    # A crawl stopped by SIGTERM (a supervisor, `timeout`) shuts down like Ctrl-C: emulators
    # stopped, summary written.
    raise KeyboardInterrupt


def _workers_asked(given: list[str]) -> int:
    """The worker processes `crawler crawl` will run, read from its arguments before they are
    parsed (0 when --workers is not a number: the parser says so); the command's default is
    one per core (pipeline.options)."""
    for i, arg in enumerate(given):
        if arg == "--workers" and i + 1 < len(given):
            value = given[i + 1]
        elif arg.startswith("--workers="):
            value = arg.partition("=")[2]
        else:
            continue
        try:
            return int(value)
        except ValueError:
            return 0
    return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> None:
    started = time.time()  # a time budget counts from here: the user's wall clock
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    given = sys.argv[1:] if argv is None else argv
    command = next((arg for arg in given if not arg.startswith("-")), None)
    if command in SYNTHETIC_WEB_COMMANDS and not has_synthetic_web():
        print(SYNTHETIC_WEB_MISSING.format(command=command), file=sys.stderr)
        raise SystemExit(2)
    # Only as the `crawler` process itself (argv None): emulators spawned for a command that
    # then fails to parse end with that process, not with a program that called main().
    if argv is None and command in LOCAL_CRAWL_COMMANDS and not any(
            arg in ("-h", "--help") for arg in given):
        from pipeline.local.emulators import prestart_missing_emulators

        prestart_missing_emulators()
        if command == "crawl":
            # Its worker processes import Beam on cores of their own while this one does.
            from pipeline.local.workers import prespawn

            prespawn(_workers_asked(given))
    parser = build_parser([command] if command in COMMANDS else None)
    args = parser.parse_args(given)
    args.started_at = started
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("apache_beam").setLevel(logging.ERROR)
    raise SystemExit(args.func(args))
