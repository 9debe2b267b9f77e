"""Near-copies in a crawl's text as a stream: each page's verdict, as JSON lines.

    python examples/near_copies.py "crawl-out/CRAWL/wet/*.warc.wet.gz" --out verdicts \
        [--threshold 0.8] [--crawl-id CRAWL]

Reads the WET records (unreadable ones are listed, not dropped), stamps each text with its
fetch time, and runs FindNearCopies in the global window, the way a streaming pipeline reading
page-crawled events would. Writes verdicts-*.jsonl under --out and prints what it wrote.
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import TimestampedValue

from pipeline.transforms.near_copies import FindNearCopies
from pipeline.transforms.readers import ReadWetTexts


def run(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wet", help="WET file pattern, e.g. crawl-out/CRAWL/wet/*.warc.wet.gz")
    parser.add_argument("--out", required=True, help="directory for the verdicts")
    parser.add_argument("--threshold", type=float, default=0.8, help="Jaccard of 5-gram shingles")
    parser.add_argument("--crawl-id", default="", help="the crawl the texts belong to")
    args, beam_args = parser.parse_known_args(argv)

    with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
        read = p | "ReadWet" >> ReadWetTexts(args.wet).with_dead_letters()
        (
            read.records
            | "FetchTime" >> beam.Map(lambda t: TimestampedValue((t.url, t.text), t.fetched_at))
            | "NearCopies" >> FindNearCopies(args.threshold, crawl_id=args.crawl_id)
            | "Json" >> beam.Map(lambda v: json.dumps(
                {"url": v.doc_id, "near_copy_of": v.near_copy_of, "jaccard": v.jaccard}))
            | "Write" >> beam.io.WriteToText(f"{args.out}/verdicts", file_name_suffix=".jsonl")
        )
        read.dead_letters | "ListUnreadable" >> beam.Map(
            lambda d: print(f"not read: {d.describe()}"))
    verdicts = [json.loads(line) for path in sorted(glob.glob(f"{args.out}/verdicts*.jsonl"))
                for line in Path(path).read_text().splitlines()]
    copies = [v for v in verdicts if v["near_copy_of"]]
    print(f"wrote {len(verdicts)} verdicts to {args.out}/verdicts-*.jsonl: "
          f"{len(copies)} near-copies")
    for v in copies:
        print(f"  {v['url']} is a near-copy of {v['near_copy_of']} (Jaccard {v['jaccard']:.3f})")
    return verdicts


if __name__ == "__main__":
    run()
