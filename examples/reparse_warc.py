"""Re-parse a crawl's stored responses with another extractor: a new WET set and pages table.

    python examples/reparse_warc.py "crawl-out/CRAWL/warc/*.warc.gz" --out reparsed \
        --crawl-id CRAWL-paragraphs --extractor paragraphs

No page is fetched again: the raw responses come from the crawl's WARC segments, and the new
rows point at those same records. Runs on the DirectRunner; pass Beam options after `--`.
"""

from __future__ import annotations

import argparse

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.core.pages import Trafilatura
from pipeline.io import storage
from pipeline.io.pages_table import query_pages
from pipeline.transforms.pages import DedupContent, ParsePages
from pipeline.transforms.readers import ReadWarcResponses
from pipeline.transforms.table import WritePagesTable


def paragraphs(tree, url: str) -> str | None:
    """A deliberately plain extractor: the text of every <p>, one paragraph a line."""
    texts = (" ".join(p.text_content().split()) for p in tree.iter("p"))
    return "\n".join(t for t in texts if t) or None


EXTRACTORS = {
    "trafilatura": Trafilatura(),
    "trafilatura-fast": Trafilatura(fast=True),
    "paragraphs": paragraphs,
}


def run(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("warc", help="WARC file pattern, e.g. crawl-out/CRAWL/warc/*.warc.gz")
    parser.add_argument("--out", required=True, help="root of the new WET set and table")
    parser.add_argument("--crawl-id", required=True, help="name of the re-parsed set")
    parser.add_argument("--extractor", choices=sorted(EXTRACTORS), default="paragraphs")
    args, beam_args = parser.parse_known_args(argv)

    with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
        parsed = (
            p
            | "ReadWarc" >> ReadWarcResponses(args.warc, crawl_id=args.crawl_id)
            | "Parse" >> ParsePages(extractor=EXTRACTORS[args.extractor])
            .with_exception_handling()
        )
        (
            parsed.pages
            | "StoreText" >> DedupContent(args.out, args.crawl_id)
            | "Rows" >> beam.Map(lambda page: page.row)
            | "WriteTable" >> WritePagesTable(args.out, args.crawl_id)
        )
        # Pages the parser failed on have a dead_lettered row above; list them too.
        parsed.dead_letters | "LogFailures" >> beam.Map(
            lambda d: print(f"could not parse {d.url}: {d.error}"))
    report_output(args.out, args.crawl_id, args.warc)


def report_output(out: str, crawl_id: str, warc: str) -> None:
    """Say what was written where: the program is otherwise silent when it succeeds."""
    crawl_dir = storage.join(out, crawl_id)
    [(rows, fetched)] = query_pages(out, crawl_id,
                                    "SELECT count(*), count(*) FILTER (WHERE state = 'fetched') "
                                    "FROM pages")
    wet = storage.list_files(storage.join(crawl_dir, "wet", "*.warc.wet.gz"))
    print(f"re-parsed {rows:,} responses of {warc} ({fetched:,} with new text)")
    print(f"  pages table  {crawl_dir}/pages/ (crawler query {crawl_dir} \"SELECT ...\")")
    print(f"  text (WET)   {crawl_dir}/wet/ ({len(wet)} file(s))")


if __name__ == "__main__":
    run()
