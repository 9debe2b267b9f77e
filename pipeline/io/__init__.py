"""Adapters to the outside world: HTTP fetching and DNS, segment files (WARC/WET), the Parquet
`pages` table and storage paths (local or GCS), a crawl's request record, Bigtable, BigQuery
and Pub/Sub messages.

Each module owns one external system and speaks the core's records at its boundary. Modules
here may import `pipeline.core` and client libraries; they never import `pipeline.transforms`,
`pipeline.local` or `pipeline.cli`, so a transform, a command or a user's own pipeline can use
them alike.
"""
