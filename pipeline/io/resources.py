"""The names of every cloud resource a crawler fleet uses: topics, subscriptions, tables.

This module owns the default names shared by the code (the launcher's option defaults) and the
infrastructure that creates the resources, so both sides name the same things. It does not
create anything. A local crawl keeps its own per-crawl names (`frontier-CRAWL_ID`, a fresh
subscription per run); a fleet on Google Cloud uses these.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.io.bigtable import CRAWLS_FAMILY, FRONTIER_FAMILY, PAGES_FAMILY
from pipeline.io.pages_table import PAGES_COLUMNS


@dataclass(frozen=True)
class CloudResources:
    """Default names of the fleet's Pub/Sub, Bigtable and BigQuery resources."""

    frontier_topic: str = "crawler-frontier"
    dead_letter_topic: str = "crawler-dead-letters"
    events_topic: str = "crawler-page-events"
    frontier_subscription: str = "crawler-frontier-fleet"  # the pipeline reads it
    dead_letter_subscription: str = "crawler-dead-letters-redrive"  # kept until redrive
    pages_table: str = "pages"
    crawls_table: str = "crawls"
    frontier_table: str = "frontier"
    # Bigtable table -> its one column family (pipeline.io.bigtable).
    column_families: dict[str, str] = field(default_factory=lambda: {
        "pages": PAGES_FAMILY, "crawls": CRAWLS_FAMILY, "frontier": FRONTIER_FAMILY,
    })
    bigquery_dataset: str = "crawler"
    bigquery_table: str = "pages"
    # BigQuery columns of the `pages` table, in order (types: pipeline.io.bigquery).
    bigquery_columns: tuple[str, ...] = tuple(column.name for column in PAGES_COLUMNS)


RESOURCES = CloudResources()
