"""Near-duplicate clusters of a crawl's text, by MinHash: Parquet files (and BigQuery).

    python examples/minhash_dedup.py "crawl-out/CRAWL/wet/*.warc.wet.gz" --out clusters \
        [--threshold 0.8] [--bigquery-table PROJECT:DATASET.TABLE -- --temp_location gs://...]

Writes clusters-*.parquet (one row per page: its cluster and the page to keep) and
pairs-*.parquet (each verified near-duplicate pair with its similarity) under --out, and
prints what it wrote.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions

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
    clusters_written = pq.read_table(glob.glob(f"{args.out}/clusters*.parquet")).to_pylist()
    pairs_written = pq.read_table(glob.glob(f"{args.out}/pairs*.parquet")).to_pylist()
    kept = sum(c["doc_id"] == c["representative"] for c in clusters_written)
    print(f"wrote {len(clusters_written)} cluster rows ({kept} pages to keep) to "
          f"{args.out}/clusters-*.parquet and {len(pairs_written)} pairs to "
          f"{args.out}/pairs-*.parquet")
    for pair in pairs_written:
        print(f"  {pair['a']} ~ {pair['b']} (Jaccard {pair['jaccard']:.3f})")


if __name__ == "__main__":
    run()
