"""Near-duplicate clusters of a crawl's text, by MinHash: Parquet files (and BigQuery).

    python examples/minhash_dedup.py "crawl-out/CRAWL/wet/*.warc.wet.gz" --out clusters \
        [--threshold 0.8] [--bigquery-table PROJECT:DATASET.TABLE -- --temp_location gs://...]

Writes clusters-*.parquet (one row per page: its cluster and the page to keep) and
pairs-*.parquet (each verified near-duplicate pair with its similarity) under --out.
"""

from __future__ import annotations

import argparse
import dataclasses

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.io import storage
from pipeline.transforms.minhash import MinHashDedup
from pipeline.transforms.readers import ReadWetTexts

CLUSTERS = pa.schema([("doc_id", pa.string()), ("cluster_id", pa.string()),
                      ("representative", pa.string()), ("cluster_size", pa.int64()),
                      ("similar_to_representative", pa.bool_())])
PAIRS = pa.schema([("a", pa.string()), ("b", pa.string()), ("estimated", pa.float64()),
                   ("jaccard", pa.float64())])
BIGQUERY_SCHEMA = ("doc_id:STRING,cluster_id:STRING,representative:STRING,"
                   "cluster_size:INTEGER,similar_to_representative:BOOLEAN")


def run(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wet", help="WET file pattern, e.g. crawl-out/CRAWL/wet/*.warc.wet.gz")
    parser.add_argument("--out", required=True, help="directory for the Parquet files")
    parser.add_argument("--threshold", type=float, default=0.8, help="Jaccard of 5-gram shingles")
    parser.add_argument("--bigquery-table", help="also load the clusters into this table")
    args, beam_args = parser.parse_known_args(argv)

    with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
        found = (
            p
            | "ReadWet" >> ReadWetTexts(args.wet)
            | "UrlAndText" >> beam.Map(lambda page: (page.url, page.text))
            | "MinHash" >> MinHashDedup(args.threshold)
        )
        clusters = found.clusters | "ClusterRows" >> beam.Map(dataclasses.asdict)
        clusters | "ClustersParquet" >> beam.io.WriteToParquet(
            f"{args.out}/clusters", CLUSTERS, file_name_suffix=".parquet")
        (
            found.pairs
            | "PairRows" >> beam.Map(dataclasses.asdict)
            | "PairsParquet" >> beam.io.WriteToParquet(
                f"{args.out}/pairs", PAIRS, file_name_suffix=".parquet")
        )
        if args.bigquery_table:
            clusters | "ClustersBigQuery" >> beam.io.WriteToBigQuery(
                args.bigquery_table, schema=BIGQUERY_SCHEMA,
                method=beam.io.WriteToBigQuery.Method.FILE_LOADS,
                write_disposition=beam.io.BigQueryDisposition.WRITE_TRUNCATE)
    report_output(args.out, args.bigquery_table)


def report_output(out: str, bigquery_table: str | None) -> None:
    """Say what was written where: the program is otherwise silent when it succeeds."""
    for name, what in (("clusters", "one row per text: its cluster and representative"),
                       ("pairs", "verified near-duplicate pairs with their similarity")):
        files = storage.list_files(f"{out}/{name}*.parquet")
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files
                   if not storage.is_gcs(f))
        counted = f"{rows:,} rows" if not storage.is_gcs(out) else "rows"
        print(f"{name}: {counted} in {len(files)} file(s) {out}/{name}-*.parquet ({what})")
    if bigquery_table:
        print(f"clusters also loaded into BigQuery table {bigquery_table}")


if __name__ == "__main__":
    run()
