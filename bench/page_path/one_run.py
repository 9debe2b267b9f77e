"""`python -m bench.page_path.one_run WEB_JSON OUT EXTRACTOR DELAY`: one run of the graph over
the URLs a JSON file lists, robots.txt's Crawl-delay capped at DELAY (so that CPU bounds the
run), in a process of its own, its figures as JSON on stdout (the process comparison of
bench.page_path.report starts these)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.page_path.crawl import Web, run_graph


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    description = json.loads(Path(args[0]).read_text())
    web = Web(description["port"], tuple(description["resolve"]), tuple(description["urls"]))
    figures = run_graph(web, web.urls, Path(args[1]), extractor=args[2], delay=float(args[3]),
                        max_crawl_delay=float(args[3]))
    print(json.dumps(figures.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
