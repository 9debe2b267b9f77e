"""The cloud resource names: the defaults the launcher and Terraform share, and their checks."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.io.bigquery import bigquery_schema
from pipeline.io.bigtable import CRAWLS_FAMILY, FRONTIER_FAMILY, PAGES_FAMILY
from pipeline.io.pages_table import PAGES_COLUMNS
from pipeline.io.resources import RESOURCES, CloudResources


def test_the_defaults_are_the_fleet_names() -> None:
    names = CloudResources()
    assert names == RESOURCES
    assert names.topics() == ("crawler-frontier", "crawler-dead-letters", "crawler-page-events")
    assert names.subscriptions() == {
        "crawler-frontier-fleet": "crawler-frontier",
        "crawler-dead-letters-redrive": "crawler-dead-letters",
    }
    assert names.column_families() == {
        "pages": (PAGES_FAMILY,), "crawls": (CRAWLS_FAMILY,), "frontier": (FRONTIER_FAMILY,),
    }
    assert names.bigquery_table_spec == "crawler.pages"


def test_bigquery_columns_follow_the_parquet_column_list() -> None:
    columns = CloudResources().bigquery_columns()
    assert [name for name, _, _ in columns] == [column.name for column in PAGES_COLUMNS]
    assert [(f["name"], f["type"], f["mode"]) for f in bigquery_schema()["fields"]] == list(
        columns
    )
    assert ("url_hash", "INT64", "REQUIRED") in columns
    assert ("fetched_at", "TIMESTAMP", "NULLABLE") in columns


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("frontier_topic", "goog-frontier"),
        ("frontier_topic", "ab"),
        ("dead_letter_subscription", "1-starts-with-a-digit"),
        ("events_topic", "has space"),
        ("pages_table", "-pages"),
        ("crawls_table", "x" * 51),
        ("bigquery_dataset", "crawler-data"),
        ("bigquery_table", "pages.v2"),
    ],
)
def test_a_name_the_service_would_refuse_is_refused_with_the_rule(field: str, bad: str) -> None:
    with pytest.raises(ValueError, match=field):
        CloudResources(**{field: bad})


@given(st.from_regex(r"[a-z][a-z0-9-]{2,40}", fullmatch=True).filter(
    lambda name: not name.startswith("goog")))
def test_any_lowercase_dashed_name_is_a_valid_topic_and_table(name: str) -> None:
    names = CloudResources(frontier_topic=name, pages_table=name[:50])
    assert names.topics()[0] == name
    assert name[:50] in names.column_families()


def test_the_schema_command_prints_what_terraform_reads(capsys: pytest.CaptureFixture) -> None:
    from pipeline.io.resources import bigquery_schema_json, main

    assert main(["bigquery-schema"]) == 0
    printed = capsys.readouterr().out
    assert printed == bigquery_schema_json()
    assert [field["name"] for field in json.loads(printed)] == [c.name for c in PAGES_COLUMNS]
