"""python -m bench.page_path: the whole per-page path against Scrapy, and one process against
two."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench import page_path
from bench.page_path.report import run_page_path, summary_json
from pipeline.core.extractors import DEFAULT_EXTRACTOR, EXTRACTORS


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="python -m bench.page_path",
                                     description=page_path.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="4 hosts instead of 16, one round and one process pair")
    parser.add_argument("--extractor", choices=EXTRACTORS, default=DEFAULT_EXTRACTOR,
                        help="the extractor both the crawler and Scrapy use")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of crawler and Scrapy, each on every page and on none "
                             "(default: 3, --quick 1)")
    parser.add_argument("--process-pairs", type=int, default=None,
                        help="repetitions of one process against two (default: 2, --quick 1;"
                             " 0 skips them)")
    parser.add_argument("--no-scrapy", action="store_true", help="skip the Scrapy runs")
    parser.add_argument("--work", type=Path, default=None,
                        help="directory for outputs and logs (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write the totals to FILE, for bench.scale_model")
    args = parser.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    pairs = args.process_pairs if args.process_pairs is not None else (1 if args.quick else 2)
    if rounds < 1:
        parser.error("--rounds must be at least 1")
    table, report = run_page_path(quick=args.quick, extractor=args.extractor, work=args.work,
                                  rounds=rounds, scrapy=not args.no_scrapy, processes=pairs)
    Console(width=160).print(table)
    if args.json is not None:
        command = " ".join(["python -m bench.page_path", *(argv if argv is not None
                                                            else sys.argv[1:])])
        args.json.write_text(json.dumps(summary_json(report, command, args.quick), indent=1)
                             + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
