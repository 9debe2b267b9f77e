"""`crawler audit OUT/CRAWL_ID`: does the crawl's own record of its requests show it was
polite? Per host (or per registered domain, `--per domain`): the shortest gap between request
starts against the delay that applied, requests in flight at once, robots.txt read before the
first page, pages robots.txt disallowed. Exit status 0 when nothing broke the rules, 1 on any
violation, 2 when the crawl has no request record.

The evidence is OUT/CRAWL_ID/requests/ (pipeline.io.request_log), which `crawler crawl` and
`crawler demo` write; the crawl's settings (min delay, Crawl-delay cap, user agent) come from
requests/settings.json, written with it, unless given as flags. The judgement is
pipeline.core.request_audit's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline.cli.query import format_rows, write_out


def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("crawl_dir", help="OUT/CRAWL_ID directory of a local crawl")
    parser.add_argument("--min-delay", type=float, default=None,
                        help="the crawl's --min-delay (default: as recorded with the crawl)")
    parser.add_argument("--max-crawl-delay", type=float, default=None,
                        help="the crawl's --max-crawl-delay (default: as recorded)")
    parser.add_argument("--user-agent", default=None,
                        help="the crawl's --user-agent (default: as recorded)")
    parser.add_argument("--tolerance", type=float, default=0.005, metavar="SECONDS",
                        help="clock slack allowed on a gap (default: %(default)s)")
    parser.add_argument("--per", choices=("host", "domain"), default="host",
                        help="count gaps and requests in flight per host, or per registered "
                             "domain (every host of it together, as --politeness-key domain "
                             "promises); robots.txt is judged per host either way "
                             "(default: %(default)s)")


def run_audit(args: argparse.Namespace) -> int:
    from pipeline.core.request_audit import audit_requests
    from pipeline.io.request_log import REQUEST_LOG_DIR, SETTINGS_FILE, read_request_log

    directory = Path(args.crawl_dir) / REQUEST_LOG_DIR
    if not directory.is_dir():
        print(f"crawler audit: {args.crawl_dir} has no request record ({directory} is "
              "missing): audit a local crawl's OUT/CRAWL_ID, made by crawler crawl",
              file=sys.stderr)
        return 2
    try:
        recorded = json.loads((directory / SETTINGS_FILE).read_text())
    except (OSError, ValueError):
        recorded = {}
    settings = {}
    for name in ("min_delay", "max_crawl_delay", "user_agent"):
        value = getattr(args, name)
        settings[name] = value if value is not None else recorded.get(name)
        if settings[name] is None:
            flag = "--" + name.replace("_", "-")
            print(f"crawler audit: the crawl's {flag} is not recorded in "
                  f"{directory / SETTINGS_FILE}: give it as {flag}", file=sys.stderr)
            return 2
    try:
        requests = list(read_request_log(args.crawl_dir))
    except (OSError, ValueError) as exc:
        print(f"crawler audit: {exc}", file=sys.stderr)
        return 2
    report = audit_requests(requests, user_agent=settings["user_agent"],
                            min_delay=settings["min_delay"],
                            max_crawl_delay=settings["max_crawl_delay"],
                            tolerance_s=args.tolerance, per=args.per)
    columns = [args.per, "requests", "robots.txt", "smallest_gap_s", "delay_s", "in_flight",
               "robots_first", "disallowed"]
    rows = [(h.host, h.requests, h.robots_requests,
             "" if h.smallest_gap_s is None else f"{h.smallest_gap_s:.4f}", f"{h.delay_s:.3f}",
             h.max_in_flight, {None: "no page", True: "yes", False: "NO"}[h.robots_first],
             h.disallowed) for h in report.hosts.values()]
    lines = [*format_rows("table", columns, rows), "\n"]
    lines += [f"note: {note}\n" for note in report.notes]
    verdict = (f"{len(requests)} requests to {len(report.hosts)} {args.per}s: "
               + ("polite (min delay {min_delay} s, Crawl-delay capped at {max_crawl_delay} s, "
                  "as {user_agent})".format(**settings) if report.ok else
                  f"{len(report.violations)} violations"))
    lines += [verdict + "\n", *(f"  {v}\n" for v in report.violations)]
    write_out(lines)
    return 0 if report.ok else 1
