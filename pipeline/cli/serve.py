"""`crawler serve`: the crawl service on this machine, the control API in front of the fleet.

It refuses to start without tokens, then starts the emulators nobody configured, creates the
Bigtable tables and the fleet's frontier topic, starts the local fleet (one pipeline crawling
every crawl the API starts), serves the API and prints its URL and a curl example. Ctrl-C (or
SIGTERM) stops it and the emulators it started.

With `--cloud` it serves only the API, against the fleet on Google Cloud: Pub/Sub and Bigtable
of --project and --bigtable-instance, where the Dataflow job (pipeline.main) is the fleet. It
is the same app Cloud Run serves (pipeline.service.cloud), run from a shell.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from pathlib import Path

from pipeline.io.resources import RESOURCES
from pipeline.options import LOCAL_PROJECT

log = logging.getLogger(__name__)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """serve's own flags, then the crawl options it takes (pipeline.options.add_serve_options):
    the local fleet's knobs, and the limits of a crawl started without its own."""
    from pipeline.options import add_serve_options

    parser.add_argument("--port", type=int, default=8080,
                        help="port of the API; 0 picks a free one (default: %(default)s)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: %(default)s, this machine only)")
    parser.add_argument("--token-file", type=Path, required=True,
                        help="file with the API's bearer tokens, one per line (at least 16 "
                             "characters each); the server refuses to start without one")
    parser.add_argument("--cloud", action="store_true",
                        help="serve the API only, against the fleet on Google Cloud (real "
                             "Pub/Sub and Bigtable of --project and --bigtable-instance, "
                             "whose Dataflow job is the fleet): no emulators, no local fleet")
    add_serve_options(parser)


def fleet_settings(options):
    """The local fleet's settings: the fleet's knobs from the command line
    (pipeline.options.serve_options), its topics the cloud fleet's names."""
    from pipeline.local.fleet import FleetSettings

    return FleetSettings(options=options, frontier_topic=options.frontier_topic,
                         dead_letter_topic=RESOURCES.dead_letter_topic,
                         dead_letter_subscription=RESOURCES.dead_letter_subscription)


def crawl_keeper(options):
    """What the local fleet keeps of each crawl its API starts, under OUT/CRAWL_ID/
    (pipeline.local.resume.keep_crawl): the manifest `crawler crawl --resume` continues the
    crawl from, should `crawler serve` die with it unfinished (its emulators, and the
    crawl's record, die with it), and the settings `crawler audit` judges it by."""
    from pipeline.local.resume import keep_crawl

    def keep(crawl) -> None:
        keep_crawl(options.out, crawl.id, crawl.seeds, crawl.limits, crawl.created_at,
                   max_crawl_delay=options.max_crawl_delay, user_agent=options.user_agent)

    return keep


def run_serve(args: argparse.Namespace) -> int:
    try:
        tokens, options = _checked(args)
    except _Refused as exc:
        print(f"crawler serve: {exc}", file=sys.stderr)
        return exc.code
    if args.cloud:
        return _run_cloud(args, options)
    return _serve_locally(args, tokens, options)


class _Refused(Exception):
    """A reason not to start, with the exit code it ends `crawler serve` with."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _checked(args: argparse.Namespace):
    """The API's tokens and the crawl options, or _Refused saying what is wrong."""
    from pipeline.service.auth import TokenFileError, load_tokens

    try:
        tokens = load_tokens(args.token_file)
    except TokenFileError as exc:
        raise _Refused(str(exc)) from None
    if not 0 <= args.port <= 65535:
        raise _Refused(f"--port {args.port} is not a port")
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise _Refused(f"the control API needs the `service` extra ({exc.name} is missing): "
                       "pip install 'beam-crawler[service]'", code=3) from None
    from pipeline.options import serve_options

    try:
        return tokens, serve_options(args)
    except ValueError as exc:
        raise _Refused(str(exc)) from None


def _serve_locally(args: argparse.Namespace, tokens, options) -> int:
    """The emulators, the local fleet and the API in front of it, until Ctrl-C or SIGTERM."""
    from pipeline.local.emulators import EmulatorMissing, start_missing_emulators, stop_emulators
    from pipeline.service.server import ApiServerFailed

    show_service_logs()
    log_dir = Path(tempfile.mkdtemp(prefix="crawler-serve-"))
    try:
        emulators = start_missing_emulators(log_dir)
    except EmulatorMissing as exc:
        print(f"crawler serve: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:  # stopped while starting: start_missing_emulators cleaned up
        return 0
    service = _LocalService()
    try:
        url = service.start(args, tokens, options)
        print(f"control API on {url} (OpenAPI: {url}/docs); emulator logs in {log_dir}")
        print("try:\n"
              f"  curl -s -H \"Authorization: Bearer $(head -n1 {args.token_file})\" \\\n"
              f"       -H 'Content-Type: application/json' \\\n"
              f"       -d '{{\"seeds\": [\"https://example.com/\"], \"max_pages\": 100}}' \\\n"
              f"       {url}/crawls")
        print(next_steps(url, args, options), flush=True)
        service.wait()
    except ApiServerFailed as exc:
        print(f"crawler serve: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping", file=sys.stderr)
    finally:
        service.stop()
        stop_emulators(emulators)
    return 0


class _LocalService:
    """The tables, the local fleet, its frontier and the API server of `crawler serve`,
    started in that order and stopped in the reverse one (whatever got started)."""

    def __init__(self) -> None:
        self.tables = self.fleet = self.frontier = self.server = None

    def start(self, args: argparse.Namespace, tokens, options) -> str:
        """Start everything; the API's URL."""
        from pipeline.io.bigtable import open_tables
        from pipeline.local.fleet import LocalFleet
        from pipeline.service.app import create_app
        from pipeline.service.control import CrawlControl, PubSubFrontier
        from pipeline.service.server import ApiServer
        from pipeline.service.status import mount_status_page

        self.tables = open_tables(options.bigtable_config(), create=True)
        settings = fleet_settings(options)
        self.fleet = LocalFleet(settings).start()
        self.frontier = PubSubFrontier(self.fleet.topic)
        control = CrawlControl(self.tables, self.frontier, options.limits(),
                               propagation_s=settings.state_ttl_s,
                               on_created=crawl_keeper(options))
        app = create_app(control, tokens)
        mount_status_page(app, out=options.out)
        self.server = ApiServer(app, host=args.host, port=args.port).start()
        return self.server.url

    def wait(self) -> None:
        self.server.wait()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.fleet is not None:
            self.fleet.stop()
        if self.frontier is not None:
            self.frontier.close()
        if self.tables is not None:
            self.tables.close()


def next_steps(url: str, args: argparse.Namespace, options) -> str:
    """What a user needs next: the status page, and the emulators' addresses to export in
    another shell for `crawler page` and `crawler status`, with this server's instance."""
    emulators = " ".join(f"{name}={os.environ[name]}" for name in
                         ("PUBSUB_EMULATOR_HOST", "BIGTABLE_EMULATOR_HOST")
                         if os.environ.get(name))
    where = "" if (options.project, options.bigtable_instance) == (LOCAL_PROJECT, "local") else (
        f" --project {options.project} --bigtable-instance {options.bigtable_instance}")
    return (f"status page: {url}/ (asks for a token of {args.token_file})\n"
            f"output: {options.out}/CRAWL_ID/ (crawler query, crawler audit)\n"
            f"in another shell, for crawler page and crawler status:\n"
            f"  export {emulators}\n"
            f"  crawler status CRAWL_ID{where}")


def show_service_logs() -> None:
    """A service's normal events are INFO (each request in the access log, a crawl ending):
    `crawler serve` shows them whatever -v says; Beam's and the clients' chatter stays out."""
    logging.getLogger().setLevel(logging.INFO)
    for noisy in ("apache_beam", "google", "grpc", "urllib3", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)


def _run_cloud(args: argparse.Namespace, options) -> int:
    """The API alone, against the cloud fleet; the same app as Cloud Run's (run_serve has
    refused an unusable token file already)."""
    from pipeline.service.cloud import CloudSettings, CloudSettingsError, create_cloud_app
    from pipeline.service.server import ApiServer, ApiServerFailed

    if options.project == LOCAL_PROJECT:
        print("crawler serve: --cloud needs --project, the project of the fleet's Pub/Sub "
              "topics and Bigtable instance", file=sys.stderr)
        return 2
    for given, flag in ((options.resolve, "--resolve"),
                        (options.allow_networks, "--allow-network")):
        if given:
            print(f"crawler serve: {flag} is the fleet's, not the API's: give it to the "
                  "Dataflow job (pipeline.main)", file=sys.stderr)
            return 2
    try:
        settings = CloudSettings(
            project=options.project, bigtable_instance=options.bigtable_instance,
            token_file=args.token_file, frontier_topic=options.frontier_topic,
            defaults=options.limits(), port=args.port or 8080)
        app = create_cloud_app(settings)
    except CloudSettingsError as exc:
        print(f"crawler serve: {exc}", file=sys.stderr)
        return 2
    try:
        server = ApiServer(app, host=args.host, port=args.port).start()
    except ApiServerFailed as exc:
        print(f"crawler serve: {exc}", file=sys.stderr)
        return 1
    print(f"control API on {server.url} (OpenAPI: {server.url}/docs) for the fleet of project "
          f"{settings.project}, Bigtable instance {settings.bigtable_instance}", flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        print("\nstopping", file=sys.stderr)
    finally:
        server.stop()
    return 0
