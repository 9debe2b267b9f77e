"""WritePagesToBigQuery: terminal page rows -> the BigQuery `pages` table, by streaming inserts.

The write itself is Beam's: the DoFn behind `WriteToBigQuery(method=STREAMING_INSERTS)`
(`BigQueryWriteFn`) creates the table if needed (schema, day partitions on fetched_at,
clustering by host; pipeline.io.bigquery), calls tabledata.insertAll in batches, retries transient
errors with backoff and hands rows BigQuery rejected to a failed-rows output. It is pure
Python, so it runs on the local runner as well as on Dataflow (no cross-language expansion).

Why not `WriteToBigQuery` itself: it gives every row a random insert id (a per-bundle UUID
plus a counter) and lets a pipeline only switch ids off (`ignore_insert_ids`), not choose them.
Those ids protect against a retried insert call, but a row that the crawler produces again
after a replay gets a fresh id and is stored twice. Here every row's insert id is
`{crawl_id}:{url_hash}` (pipeline.io.bigquery.insert_id), so BigQuery's best-effort dedup (rows
with an id it saw in about the last minute are dropped) catches both kinds of repeat. Dedup
is best-effort: queries still count pages once per (crawl_id, url_hash), as docs/queries do.

Rows are batched first (BatchRows on `shards` keys: at most `batch_size` rows or
`max_wait_s` seconds per insert call), as WritePagesTable batches Parquet parts; the number of
shard keys bounds the number of concurrent insert calls. The job sizes it from its workers
(pipeline.main.row_shards), so no key carries more than its share of the job's rows.

`api_endpoint` points the write at another BigQuery REST endpoint, such as a local emulator,
with no credentials. Beam has one hook for that, the write DoFn's `test_client`: the client
given there answers both Beam's table calls (apitools) and its insert calls
(google-cloud-bigquery).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apache_beam as beam
from apache_beam.io.gcp.bigquery import BigQueryDisposition, BigQueryWriteFn
from apache_beam.io.gcp.bigquery_tools import RetryStrategy

from pipeline.core.counters import Counter
from pipeline.core.records import PageRow
from pipeline.io.bigquery import (
    bigquery_schema,
    insert_id,
    parse_table_spec,
    row_to_bigquery,
    table_parameters,
)
from pipeline.metrics import crawl_counter
from pipeline.transforms.batches import BatchRows
from pipeline.transforms.coders import PageRowCoder

# insertAll accepts up to 50,000 rows and 10 MB per call and recommends about 500 rows.
DEFAULT_BATCH_SIZE = 500


class EndpointClient:
    """A BigQuery client for a non-Google REST endpoint (an emulator), without credentials.

    It serves what Beam's BigQueryWrapper calls on the client it is given when it streams rows:
    `tables` (apitools: get, insert) and `insert_rows_json` (google-cloud-bigquery).
    Inserts retry only until `insert_deadline_s`: an emulator answers a row it cannot store with
    HTTP 500 (BigQuery reports it per row instead), which the google-cloud-bigquery client would
    otherwise retry for ten minutes; past the deadline the bundle fails and the runner retries
    it. bqemulator accepts insert ids but does not deduplicate on them. Picklable: the clients
    are built on first use in each worker.
    """

    def __init__(self, endpoint: str, project: str, *, insert_deadline_s: float = 10.0) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(
                f"BigQuery endpoint {endpoint!r} must be a URL such as http://127.0.0.1:9050"
            )
        self.endpoint = endpoint.rstrip("/")
        self.project = project
        self.insert_deadline_s = insert_deadline_s
        self._apitools: Any = None
        self._cloud: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "project": self.project,
            "insert_deadline_s": self.insert_deadline_s,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._apitools = None
        self._cloud = None

    def _tables_api(self) -> Any:
        if self._apitools is None:
            from apache_beam.io.gcp.internal.clients import bigquery as bigquery_api

            self._apitools = bigquery_api.BigqueryV2(
                url=f"{self.endpoint}/bigquery/v2/",
                get_credentials=False,
                response_encoding="utf8",
            )
        return self._apitools

    @property
    def tables(self) -> Any:
        return self._tables_api().tables

    def cloud_client(self) -> Any:
        """The google-cloud-bigquery client for this endpoint (also handy to query it)."""
        if self._cloud is None:
            from google.api_core.client_options import ClientOptions
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import bigquery

            self._cloud = bigquery.Client(
                project=self.project,
                credentials=AnonymousCredentials(),
                client_options=ClientOptions(api_endpoint=self.endpoint),
            )
        return self._cloud

    def insert_rows_json(self, table: Any, json_rows: list[dict[str, Any]], **kwargs: Any) -> Any:
        from google.cloud.bigquery import DEFAULT_RETRY

        kwargs.setdefault("retry", DEFAULT_RETRY.with_deadline(self.insert_deadline_s))
        return self.cloud_client().insert_rows_json(table, json_rows, **kwargs)


def _to_insert(row: PageRow) -> tuple[dict[str, Any], str]:
    return row_to_bigquery(row), insert_id(row)


class _CountFailedFn(beam.DoFn):
    def __init__(self) -> None:
        self._failed = crawl_counter(Counter.BIGQUERY_ROWS_FAILED)

    def process(self, failed: tuple[str, dict[str, Any], Any]) -> Iterable[Any]:
        self._failed.inc()
        yield failed


class WritePagesToBigQuery(beam.PTransform):
    """PageRow -> rows of the BigQuery table `PROJECT:DATASET.TABLE` (created if missing).

    Returns the rows BigQuery rejected, as `(table, row_json, errors)`, counted in
    `bigquery_rows_failed`; transient errors are retried, not returned. By default it writes to
    Google's BigQuery with the pipeline's credentials; `api_endpoint` writes to another REST
    endpoint without credentials (EndpointClient), `client` through any object that answers
    what EndpointClient answers (picklable, as it travels with the DoFn).
    """

    def __init__(
        self,
        table_spec: str,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_wait_s: float = 1.0,
        shards: int = 8,
        api_endpoint: str | None = None,
        insert_deadline_s: float = 10.0,
        client: Any = None,
    ) -> None:
        super().__init__()
        if not 1 <= batch_size <= 50_000 or shards < 1 or max_wait_s <= 0:
            raise ValueError(
                "batch_size must be 1..50000 (insertAll's limit), shards >= 1 and max_wait_s > 0"
            )
        if api_endpoint is not None and client is not None:
            raise ValueError("give api_endpoint or client, not both")
        self._table = parse_table_spec(table_spec)
        self._batch_size = batch_size
        self._max_wait_s = max_wait_s
        self._shards = shards
        self._client = (
            EndpointClient(api_endpoint, self._table.project, insert_deadline_s=insert_deadline_s)
            if api_endpoint is not None
            else client
        )

    def expand(self, rows):
        shards = self._shards
        destination = str(self._table)
        write = BigQueryWriteFn(
            batch_size=self._batch_size,
            schema=bigquery_schema(),
            create_disposition=BigQueryDisposition.CREATE_IF_NEEDED,
            write_disposition=BigQueryDisposition.WRITE_APPEND,
            retry_strategy=RetryStrategy.RETRY_ON_TRANSIENT_ERROR,
            additional_bq_parameters=table_parameters(),
            with_batched_input=True,
            test_client=self._client,
        )
        results = (
            rows
            | "KeyByShard" >> beam.Map(lambda row: (row.url_hash % shards, row))
            .with_output_types(tuple[int, PageRow])
            | "Batch" >> BatchRows(PageRowCoder(), self._batch_size, self._max_wait_s)
            | "ToInsertRows" >> beam.MapTuple(
                lambda _, batch: (destination, [_to_insert(row) for row in batch])
            )
            | "StreamingInsert" >> beam.ParDo(write).with_outputs(
                BigQueryWriteFn.FAILED_ROWS_WITH_ERRORS, BigQueryWriteFn.FAILED_ROWS, main="main"
            )
        )
        return results[BigQueryWriteFn.FAILED_ROWS_WITH_ERRORS] | "CountFailed" >> beam.ParDo(
            _CountFailedFn()
        )
