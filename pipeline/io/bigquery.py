"""The `pages` table in BigQuery: its schema, its name, its partitioning, and its row encoding.

Everything here is derived from pipeline.io.pages_table.PAGES_COLUMNS, the one column list the
Parquet table is built from too, so both stores have the same columns in the same order. This
module owns what a BigQuery `pages` row looks like on the wire (the tabledata.insertAll JSON
form); it does not write anything (pipeline.transforms.bigquery does) and decides nothing about
page states.

Layout in BigQuery: one table for all crawls (rows carry crawl_id), partitioned by day on
`fetched_at` and clustered by `host`. Rows that were never fetched (disallowed, filtered,
over_budget, failed before any answer) have no fetched_at; BigQuery keeps them in the table's
`__NULL__` partition, so they are still counted by every query, and a query that filters on
fetched_at skips them together with the other days' partitions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from pipeline.core.records import PageRow
from pipeline.io.pages_table import PAGES_COLUMNS, Column, row_to_dict

PARTITION_FIELD = "fetched_at"
CLUSTER_FIELDS: tuple[str, ...] = ("host",)

# insertAll's own row format for TIMESTAMP (what google-cloud-bigquery sends too).
_RFC3339_MICROS = "%Y-%m-%dT%H:%M:%S.%fZ"


def _bigquery_type_of(arrow_type: pa.DataType) -> str | None:
    """The one BigQuery type a column of this arrow type may be declared as."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "STRING"
    if pa.types.is_integer(arrow_type):
        return "INT64"
    if pa.types.is_floating(arrow_type):
        return "FLOAT64"
    if pa.types.is_boolean(arrow_type):
        return "BOOL"
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        return "TIMESTAMP"  # a zoned instant; a naive arrow timestamp would be DATETIME
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return "BYTES"
    return None


def _checked(column: Column) -> Column:
    expected = _bigquery_type_of(column.arrow_type)
    if expected is None:
        raise ValueError(
            f"pages column {column.name!r} has arrow type {column.arrow_type}, which has no "
            f"BigQuery mapping here; add one to pipeline.io.bigquery._bigquery_type_of"
        )
    if column.bigquery_type != expected:
        raise ValueError(
            f"pages column {column.name!r} is {column.arrow_type} in Parquet but "
            f"{column.bigquery_type} in BigQuery; declare it {expected} in PAGES_COLUMNS"
        )
    return column


def bigquery_schema() -> dict[str, list[dict[str, str]]]:
    """The table schema as BigQuery's REST API and Beam's WriteToBigQuery take it.

    `{"fields": [{"name", "type", "mode", "description"}, ...]}`, one field per PAGES_COLUMNS
    entry in the same order; a column that may not be NULL in Parquet is REQUIRED here.
    Raises ValueError if a column's BigQuery type does not fit its arrow type.
    """
    return {
        "fields": [
            {
                "name": column.name,
                "type": column.bigquery_type,
                "mode": "NULLABLE" if column.nullable else "REQUIRED",
                "description": column.description,
            }
            for column in map(_checked, PAGES_COLUMNS)
        ]
    }


def time_partitioning() -> dict[str, str]:
    """Daily partitions on fetched_at (rows without one land in `__NULL__`)."""
    return {"type": "DAY", "field": PARTITION_FIELD}


def clustering() -> dict[str, list[str]]:
    """Rows of one host sit together inside each partition."""
    return {"fields": list(CLUSTER_FIELDS)}


def table_parameters() -> dict[str, Any]:
    """The table resource's partitioning and clustering, as Beam's additional_bq_parameters."""
    return {"timePartitioning": time_partitioning(), "clustering": clustering()}


# Project ids: 6-30 of [a-z0-9-], starting with a letter, optionally domain-scoped
# ("example.com:my-project"); datasets: letters, digits, underscores; tables: letters, marks,
# digits, connectors and dashes (BigQuery also allows spaces, which this crawler does not).
_PROJECT = r"(?:[a-z0-9][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]"
_DATASET = r"[A-Za-z0-9_]{1,1024}"
_TABLE = r"[\w-]{1,1024}"
_TABLE_SPEC = re.compile(
    rf"(?P<project>{_PROJECT})[:.](?P<dataset>{_DATASET})\.(?P<table>{_TABLE})"
)
_EXAMPLE = "my-project:crawl.pages"


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A fully qualified BigQuery table."""

    project: str
    dataset: str
    table: str

    def __str__(self) -> str:
        """The `PROJECT:DATASET.TABLE` form Beam and the bq tool take."""
        return f"{self.project}:{self.dataset}.{self.table}"

    @property
    def sql_name(self) -> str:
        """The table's name in GoogleSQL, quoted: `PROJECT.DATASET.TABLE`."""
        return f"`{self.project}.{self.dataset}.{self.table}`"


def parse_table_spec(spec: str) -> TableSpec:
    """Parse `PROJECT:DATASET.TABLE` (or `PROJECT.DATASET.TABLE`); ValueError says what is wrong."""
    text = spec.strip()
    match = _TABLE_SPEC.fullmatch(text)
    if match is not None:
        return TableSpec(match["project"], match["dataset"], match["table"])
    if not text:
        raise ValueError(
            f"the BigQuery table is empty; give PROJECT:DATASET.TABLE, e.g. {_EXAMPLE}"
        )
    if text.count(".") == 1 and ":" not in text:
        raise ValueError(
            f"BigQuery table {spec!r} has no project; give PROJECT:DATASET.TABLE, e.g. "
            f"{_EXAMPLE}"
        )
    head, sep, rest = text.rpartition(":")
    project = head if sep else text.split(".", 1)[0]
    if not re.fullmatch(_PROJECT, project):
        raise ValueError(
            f"BigQuery table {spec!r}: {project!r} is not a project id (6-30 lowercase "
            f"letters, digits or hyphens, starting with a letter); give PROJECT:DATASET.TABLE, "
            f"e.g. {_EXAMPLE}"
        )
    names = (rest if sep else text.split(".", 1)[-1]).split(".")
    if len(names) != 2:
        raise ValueError(
            f"BigQuery table {spec!r} must name exactly one dataset and one table after the "
            f"project: PROJECT:DATASET.TABLE, e.g. {_EXAMPLE}"
        )
    dataset, table = names
    if not re.fullmatch(_DATASET, dataset):
        raise ValueError(
            f"BigQuery table {spec!r}: dataset {dataset!r} may only hold letters, digits and "
            f"underscores"
        )
    raise ValueError(
        f"BigQuery table {spec!r}: table name {table!r} may only hold letters, digits, "
        f"underscores and hyphens (1-1024 characters)"
    )


def insert_id(row: PageRow) -> str:
    """The row's streaming insert id: the same page of the same crawl always gets the same one,
    so BigQuery's best-effort dedup drops a replayed row (within its dedup window, about a
    minute)."""
    return f"{row.crawl_id}:{row.url_hash}"


_REQUIRED = tuple(column.name for column in PAGES_COLUMNS if not column.nullable)


def row_to_bigquery(row: PageRow) -> dict[str, Any]:
    """A PageRow as the JSON object tabledata.insertAll takes (json.dumps-able).

    Same columns and values as the Parquet row (pipeline.io.pages_table.row_to_dict: pointers
    split into file/offset/length, fetched_at rounded to microseconds), encoded the way the
    REST API reads them: INT64 as decimal strings (JSON numbers lose 64-bit hashes past 2^53),
    TIMESTAMP as RFC 3339 UTC with microseconds, NULL as null. Raises ValueError naming the
    columns if a REQUIRED value is missing.
    """
    values = row_to_dict(row)
    missing = [name for name in _REQUIRED if values[name] is None]
    if missing:
        raise ValueError(f"page row for {row.url!r} lacks required columns {missing}")
    encoded: dict[str, Any] = {}
    for column in PAGES_COLUMNS:
        value = values[column.name]
        if value is None:
            encoded[column.name] = None
        elif column.bigquery_type == "INT64":
            encoded[column.name] = str(int(value))
        elif column.bigquery_type == "TIMESTAMP":
            assert isinstance(value, datetime)
            encoded[column.name] = value.astimezone(UTC).strftime(_RFC3339_MICROS)
        else:
            encoded[column.name] = value
    return encoded
