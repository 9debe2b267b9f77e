"""templates/metadata.json: generated from the options, valid against Dataflow's own
TemplateMetadata schema, and every parameter's regex admits exactly values the crawl accepts."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import googleapiclient
import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.io.bigquery import parse_table_spec
from pipeline.options import (
    METADATA_PATH,
    OPTIONS,
    CrawlOptions,
    Option,
    template_metadata,
)

ROOT = Path(__file__).resolve().parents[1]
DISCOVERY = (Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"
             / "dataflow.v1b3.json")
TEMPLATE_OPTIONS = [opt for opt in OPTIONS if opt.template]


def _committed() -> dict[str, Any]:
    return json.loads((ROOT / METADATA_PATH).read_text(encoding="utf-8"))


def test_the_committed_metadata_is_the_one_generated_from_the_options():
    assert _committed() == template_metadata()


def _json_schema(discovery: dict[str, Any], root: str) -> dict[str, Any]:
    """A JSON Schema for one schema of a Google discovery document.

    Discovery schemas are JSON-Schema-like, with `$ref` naming another schema by id and
    "Required." at the start of a property's description. Here references point into
    `$defs`, described-as-required properties are required, and unknown properties are
    refused, so a misspelt key (`helptext`) fails instead of being ignored.
    """

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {key: convert(value) for key, value in node.items()
               if key not in ("id", "enumDescriptions", "enumDeprecated")}
        if "$ref" in node:
            out["$ref"] = f"#/$defs/{node['$ref']}"
        if node.get("type") == "object" and "properties" in node:
            out["additionalProperties"] = False
            required = [name for name, prop in node["properties"].items()
                        if prop.get("description", "").startswith("Required.")]
            if required:
                out["required"] = required
        return out

    defs = {name: convert(schema) for name, schema in discovery["schemas"].items()}
    return {"$ref": f"#/$defs/{root}", "$defs": defs}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return _json_schema(json.loads(DISCOVERY.read_text(encoding="utf-8")), "TemplateMetadata")


def test_the_metadata_is_valid_against_dataflows_template_metadata_schema(schema):
    jsonschema.Draft202012Validator(schema).validate(_committed())


@pytest.mark.parametrize("broken", [
    {"helptext": "misspelt key"},
    {"paramType": "NOT_A_TYPE"},
    {"isOptional": "yes"},
])
def test_the_schema_check_catches_a_broken_parameter(schema, broken):
    metadata = _committed()
    metadata["parameters"][0] = {**metadata["parameters"][0], **broken}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(metadata)


def test_a_parameter_without_its_required_label_is_refused(schema):
    metadata = _committed()
    del metadata["parameters"][0]["label"]
    with pytest.raises(jsonschema.ValidationError, match="label"):
        jsonschema.Draft202012Validator(schema).validate(metadata)


def test_the_metadata_speaks_of_a_streaming_job_and_names_every_template_option():
    metadata = template_metadata()
    assert metadata["streaming"] is True
    names = [p["name"] for p in metadata["parameters"]]
    assert names == [opt.beam_name for opt in TEMPLATE_OPTIONS]
    assert len(set(names)) == len(names)
    # Flex Templates pass parameters as --name=value: names are identifiers.
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", name) for name in names)
    required = {p["name"] for p in metadata["parameters"] if not p["isOptional"]}
    assert required == {"out", "bigtable_instance"}
    # The job serves every crawl the API starts: no crawl of its own, no mode, and no crawl's
    # own limits (each crawl brings them).
    assert not {"crawl_id", "mode", "max_pages", "max_depth", "crawler_user_agent",
                "min_delay", "max_duration"} & set(names)


# --- Regexes ---------------------------------------------------------------------------

def _accepted(opt: Option, text: str) -> bool:
    """Whether the crawl takes `text` as this option's value: its parser, then every check
    CrawlOptions and the value objects built from it make, then the launcher's."""
    try:
        value = opt.parse(text)
        crawl = CrawlOptions.from_values({opt.dest: value}, ())
        crawl.host_policy(), crawl.fetch_config(), crawl.duplicate_policy()
    except (ValueError, TypeError, ArithmeticError, argparse.ArgumentTypeError):
        return False
    if opt.dest == "out":
        return text.startswith("gs://") and len(text) > len("gs://") + 2
    if opt.dest == "bigquery_table":
        try:
            parse_table_spec(text)
        except ValueError:
            return False
    return True


# Resource names the code takes as given (Google's APIs check them): examples both ways.
NAMED = {
    "bigtable_instance": (["crawler-pages", "crawl2026"],
                          ["local", "Crawler", "crawler-", "9x-12345"]),
    "pages_table": (["pages", "pages_v2.a-b"], ["", "pages/x", "p" * 51]),
    "crawls_table": (["crawls"], ["cr awls"]),
    "frontier_table": (["frontier"], ["front:ier"]),
    "frontier_subscription": (["crawler-frontier-fleet"], ["9starts-with-digit", "ab"]),
    "frontier_topic": (["crawler-frontier"], ["has space", "x"]),
    "dead_letter_topic": (["crawler-dead-letters"], ["dead/letters"]),
    "events_topic": (["crawler-page-events"], ["-events"]),
    # An import path: the launcher imports it (a regex cannot know what the image holds).
    "priority": (["examples.priority_hooks:shortest_path_first", "my_hooks.rank:by_depth"],
                 ["examples.priority_hooks", "a:b:c", "mod:f()", "1mod:f", "mod/x:f"]),
}
# Values tried against every option. A regex may be stricter than Python's parsers (int(" 5")
# is 5), never looser; a plain decimal or word the crawl accepts must match.
POOL = ["", " 5", "5 ", "0", "1", "3", "16", "17", "2000", "-1", "0.0", "0.5", "1.0", "2.5",
        "1e-4", "0.0001", "1.5e-3", "abc", "1,000", "trafilatura", "trafilatura-fast",
        "crawl-1", "c 1", "a/b", "gs://some-bucket/crawl", "gs://Bad_Bucket", "/tmp/out",
        "my-project:crawl.pages", "crawl.pages", "beam-crawler/0.1 (+https://x.test/bot)"]
_PLAIN = re.compile(r"[0-9]+(?:\.[0-9]+)?|[a-z][-a-z0-9]*")


def _regex_of(opt: Option) -> re.Pattern[str]:
    (regex,) = next(p["regexes"] for p in template_metadata()["parameters"]
                    if p["name"] == opt.beam_name)
    return re.compile(regex)


@pytest.mark.parametrize("opt", TEMPLATE_OPTIONS, ids=lambda opt: opt.dest)
def test_every_regex_compiles_and_is_tried_on_valid_and_invalid_values(opt):
    pattern = _regex_of(opt)
    valid, invalid = NAMED.get(opt.dest, ([], []))
    if opt.default is not None and not opt.template_required:
        valid = [*valid, str(opt.default)]
    for text in valid:
        assert pattern.search(text), f"{opt.dest}: {text!r} should match {pattern.pattern}"
    for text in ["", " leading-space", *invalid]:
        assert not pattern.search(text), f"{opt.dest}: {text!r} should not match"
    if opt.dest in NAMED:
        return
    refused = 0
    for text in POOL:
        accepted = _accepted(opt, text)
        matched = bool(pattern.search(text))
        assert accepted or not matched, f"{opt.dest}: {text!r} matches but the crawl refuses it"
        if accepted and _PLAIN.fullmatch(text):
            assert matched, f"{opt.dest}: {text!r} is a plain value the crawl takes"
        refused += not accepted
    assert refused, f"{opt.dest}: no value of the pool was one the crawl refuses"


@pytest.mark.parametrize("opt", [o for o in TEMPLATE_OPTIONS if o.dest not in NAMED],
                         ids=lambda opt: opt.dest)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_whatever_a_regex_matches_the_crawl_accepts(opt, data):
    text = data.draw(st.from_regex(opt.template_regex, fullmatch=True))
    assert _accepted(opt, text), f"{opt.dest}: {text!r} matches but is refused"
