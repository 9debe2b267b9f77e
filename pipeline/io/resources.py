"""The names of every cloud resource the crawler fleet uses, in one place.

This module owns the default names of the Pub/Sub topics and subscriptions, the Bigtable tables
and their column families, and the BigQuery dataset and table that one long-running Dataflow
job serves all crawls with. The launcher takes its option defaults from here, and Terraform
creates exactly these resources (tests/test_terraform.py checks both directions). It creates
nothing and talks to no service.

The embedded local run keeps its own per-crawl names (pipeline.io.redrive, pipeline.io.events):
it makes fresh topics and subscriptions for every run, because the Pub/Sub emulator hides
messages of a cancelled pull for about a minute.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, fields

from pipeline.io.bigquery import bigquery_schema
from pipeline.io.bigtable import CRAWLS_FAMILY, FRONTIER_FAMILY, PAGES_FAMILY

# Naming rules of each service, so a bad name fails at launch with the rule, not in the job.
_PUBSUB_NAME = re.compile(r"(?!goog)[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}")
_BIGTABLE_TABLE = re.compile(r"[_a-zA-Z0-9][-_.a-zA-Z0-9]{0,49}")
_BIGQUERY_DATASET = re.compile(r"[A-Za-z0-9_]{1,1024}")
_BIGQUERY_TABLE = re.compile(r"[\w-]{1,1024}")

_RULES: dict[str, tuple[re.Pattern[str], str]] = {
    "pubsub": (_PUBSUB_NAME, "3-255 letters, digits or -_.~+%, starting with a letter, "
                             "not with 'goog'"),
    "bigtable": (_BIGTABLE_TABLE, "1-50 letters, digits or -_., not starting with - or ."),
    "dataset": (_BIGQUERY_DATASET, "letters, digits and underscores"),
    "table": (_BIGQUERY_TABLE, "letters, digits, underscores and hyphens"),
}
_KIND_OF_FIELD = {
    "frontier_topic": "pubsub",
    "dead_letter_topic": "pubsub",
    "events_topic": "pubsub",
    "frontier_subscription": "pubsub",
    "dead_letter_subscription": "pubsub",
    "pages_table": "bigtable",
    "crawls_table": "bigtable",
    "frontier_table": "bigtable",
    "bigquery_dataset": "dataset",
    "bigquery_table": "table",
}


@dataclass(frozen=True)
class CloudResources:
    """Names (not paths: the project and instance come from the job's options)."""

    frontier_topic: str = "crawler-frontier"
    dead_letter_topic: str = "crawler-dead-letters"
    events_topic: str = "crawler-page-events"
    # The pipeline reads this one; one subscription for the whole fleet.
    frontier_subscription: str = "crawler-frontier-fleet"
    # Keeps dead letters until `crawler redrive` moves them back onto the frontier.
    dead_letter_subscription: str = "crawler-dead-letters-redrive"
    pages_table: str = "pages"
    crawls_table: str = "crawls"
    frontier_table: str = "frontier"
    bigquery_dataset: str = "crawler"
    bigquery_table: str = "pages"

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            pattern, rule = _RULES[_KIND_OF_FIELD[field.name]]
            if not isinstance(value, str) or not pattern.fullmatch(value):
                raise ValueError(f"{field.name} {value!r} is not a valid name: {rule}")

    def topics(self) -> tuple[str, ...]:
        return (self.frontier_topic, self.dead_letter_topic, self.events_topic)

    def subscriptions(self) -> dict[str, str]:
        """Each subscription the fleet needs, with the topic it reads."""
        return {
            self.frontier_subscription: self.frontier_topic,
            self.dead_letter_subscription: self.dead_letter_topic,
        }

    def column_families(self) -> dict[str, tuple[str, ...]]:
        """Each Bigtable table with the column families the code writes to it."""
        return {
            self.pages_table: (PAGES_FAMILY,),
            self.crawls_table: (CRAWLS_FAMILY,),
            self.frontier_table: (FRONTIER_FAMILY,),
        }

    def bigquery_columns(self) -> tuple[tuple[str, str, str], ...]:
        """(name, type, mode) of each column of the BigQuery `pages` table, in order: the
        Parquet table's column list (pipeline.io.pages_table.PAGES_COLUMNS) in BigQuery terms."""
        return tuple(
            (column["name"], column["type"], column["mode"])
            for column in bigquery_schema()["fields"]
        )

    @property
    def bigquery_table_spec(self) -> str:
        """`DATASET.TABLE`; prefix the project (`PROJECT:`) for Beam and the bq tool."""
        return f"{self.bigquery_dataset}.{self.bigquery_table}"


RESOURCES = CloudResources()


def bigquery_schema_json() -> str:
    """The `pages` table's schema as Terraform's google_bigquery_table takes it (a JSON array
    of fields), the content of terraform/pages_schema.json."""
    return json.dumps(bigquery_schema()["fields"], indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.io.resources",
        description="Print what Terraform needs from the code's resource definitions.",
    )
    parser.add_argument("what", choices=["bigquery-schema"],
                        help="bigquery-schema: the pages table's columns "
                             "(save as terraform/pages_schema.json)")
    parser.parse_args(argv)
    sys.stdout.write(bigquery_schema_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
