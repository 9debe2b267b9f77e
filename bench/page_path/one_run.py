"""`python -m bench.page_path.one_run WEB_JSON OUT EXTRACTOR DELAY`: in a process of its own,
the graph on none of the URLs a JSON file lists, then on all of them, robots.txt's Crawl-delay
capped at DELAY (so that CPU bounds the run); the second run's figures as JSON on stdout, with
the first's wall and CPU time (the process comparison of bench.page_path.report starts
these)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.page_path.crawl import Web, run_graph


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    description = json.loads(Path(args[0]).read_text())
    web = Web(description["port"], tuple(description["resolve"]), tuple(description["urls"]))
    delay = float(args[3])
    empty = run_graph(web, (), Path(args[1]) / "none", extractor=args[2], delay=delay,
                      max_crawl_delay=delay)
    figures = run_graph(web, web.urls, Path(args[1]) / "all", extractor=args[2], delay=delay,
                        max_crawl_delay=delay)
    print(json.dumps({**figures.to_json(), "empty_wall_s": empty.wall_s,
                      "empty_cpu_s": empty.cpu_s}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
