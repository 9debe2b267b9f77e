"""Every knob of a crawl in one place: OPTIONS, whose help texts are the documentation.

This module owns option names, defaults, help texts and validation, and everything generated
from them: the Beam `CrawlPipelineOptions` (what `python -m pipeline.main` and a Flex Template
job parse), the `crawler crawl` arguments, the template's `metadata.json`, and the options
tables of docs/options.md and README.md (`python -m pipeline.options --write` regenerates the
files; a test checks they are current). `CrawlOptions` is the typed, frozen view the graph,
the transforms and the local runtime read, with the value objects the transforms take. It does
not run anything.

Each option is declared once, as an `Option`. Beam spells options `--max_pages`; the
`crawler` command has always spelled them `--max-pages`: Beam's parser accepts both, the
command shows its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from pipeline.core.addresses import parse_network
from pipeline.core.crawl_states import CrawlLimits
from pipeline.core.extractors import DEFAULT_EXTRACTOR, EXTRACTORS, extractor_help
from pipeline.core.near_duplicates import DuplicatePolicy
from pipeline.core.politeness import HostPolicy
from pipeline.core.politeness_keys import PolitenessKey
from pipeline.core.priority import PriorityHook
from pipeline.core.scope import ScopeRule, check_pattern
from pipeline.io.bigtable import BigtableConfig
from pipeline.io.dns import parse_resolve
from pipeline.io.fetch import DEFAULT_USER_AGENT, FetchConfig
from pipeline.io.resources import RESOURCES

LOCAL_PROJECT = "local-crawler"  # the project the local emulators accept
# A crawl's record always holds a page budget; "no limit" is this many pages.
MAX_PAGES_UNBOUNDED = 10**12
# Main-text extractors, their figures and the default's rule: pipeline.core.extractors. The
# Rust port rs-trafilatura has no wheel on PyPI (its build needs crates.io).
# A crawl id names Pub/Sub topics, output directories and the last part of Bigtable row keys
# (`reversed-host/url-hash/crawl-id`), so it may not hold '/' or anything a topic refuses.
_CRAWL_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")

TEMPLATE_NAME = "beam-crawler"
TEMPLATE_DESCRIPTION = (
    "A polite web crawler as a streaming pipeline, by default the fleet that serves every "
    "crawl the control API starts: reads URL batches from the frontier "
    "subscription, fetches each host at most once per delay, writes WARC/WET segments to "
    "Cloud Storage, page rows to Bigtable (and optionally BigQuery), and loops links back "
    "to the frontier topic."
)


def new_crawl_id() -> str:
    return time.strftime("c%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(2)


# --- Value types: an argparse converter and the template regex of the same values ----------


def _whole(text: str) -> int:
    # argparse words a ValueError after the function's name ("invalid _positive_int value");
    # ArgumentTypeError's message is shown as it is.
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _positive_int(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = _number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _fraction(text: str) -> float:
    value = _number(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


@dataclass(frozen=True)
class ValueType:
    """How an option's text becomes a value, and the regex a template checks the text with.

    The regexes use no lookarounds or backreferences, so they mean the same to Python, to Java
    (the Dataflow service) and to RE2; tests/test_template_metadata.py checks that whatever
    one matches the crawl accepts."""

    parse: Callable[[str], Any]
    regex: str
    param_type: str  # ParameterMetadata.paramType
    kind: type = str  # the value's Python type (the API's JSON type)
    # The range the value type allows, as JSON Schema keywords (ge, gt, max_length, ...):
    # what the API's schema documents; parse enforces the same.
    bounds: tuple[tuple[str, Any], ...] = ()


POSITIVE_INT = ValueType(_positive_int, r"^[0-9]*[1-9][0-9]*$", "NUMBER", int, (("ge", 1),))
NON_NEGATIVE_INT = ValueType(_non_negative_int, r"^[0-9]+$", "NUMBER", int, (("ge", 0),))
# A decimal number with a non-zero digit somewhere: > 0 (exponents are not needed here).
POSITIVE_FLOAT = ValueType(
    _positive_float, r"^(?:[0-9]*[1-9][0-9]*(?:\.[0-9]*)?|[0-9]*\.[0-9]*[1-9][0-9]*)$", "NUMBER",
    float, (("gt", 0),))
NON_NEGATIVE_FLOAT = ValueType(_non_negative_float, r"^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$",
                               "NUMBER", float, (("ge", 0),))
# Between 0 and 1: a decimal below 1, or d.ddd e-N with N of at most two digits (1e-1000 is 0).
FRACTION = ValueType(
    _fraction, r"^(?:0*\.[0-9]*[1-9][0-9]*|[1-9](?:\.[0-9]+)?[eE]-0*[1-9][0-9]?)$", "NUMBER",
    float, (("gt", 0), ("lt", 1)))
TEXT = ValueType(str, r"^\S(?:.*\S)?$", "TEXT")


def _pattern(text: str) -> str:
    try:
        return check_pattern(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


# On or off (--sitemaps): a flag on the command line, a boolean in a request.
FLAG = ValueType(_flag, r"^(?:true|false)$", "TEXT", bool)
# A regular expression (--include, --exclude).
PATTERN = ValueType(_pattern, r"^.+$", "TEXT", str, (("min_length", 1),))
SCOPE_RULES = tuple(str(rule) for rule in ScopeRule)
POLITENESS_KEYS = tuple(str(key) for key in PolitenessKey)

_HEADER_MAX = 512


def _header_text(text: str) -> str:
    if not text.strip() or any(not 0x20 <= ord(ch) <= 0x7E for ch in text):
        raise argparse.ArgumentTypeError(
            "must be printable ASCII and not blank (it is sent as an HTTP header)")
    if len(text) > _HEADER_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {_HEADER_MAX} characters")
    return text


# Text sent as an HTTP header value: printable ASCII, not blank.
HEADER_TEXT = ValueType(_header_text, r"^[ -~]*[!-~][ -~]*$", "TEXT", str,
                        (("min_length", 1), ("max_length", _HEADER_MAX)))


@dataclass(frozen=True)
class Option:
    """One option, declared once: its name, value type, default and help.

    `dest` names it in `crawler crawl`'s arguments and in CrawlOptions; `beam_name` in Beam's
    pipeline options and the template (the same but where Beam already has the name);
    `flag` is the `crawler crawl` spelling.
    `cli`: part of `crawler crawl`; `serve`: part of `crawler serve`; `template`: a parameter
    of the Flex Template job (options that only make sense on one machine, or that Beam
    itself owns, are not). A `per_crawl` option is a crawl's own limit: a field of POST
    /crawls (`api_name`, required with `api_required`), kept in the crawl's record
    (pipeline.core.crawl_states.CrawlLimits has a field of that name), refused by a job that
    serves many crawls, and the default of a crawl that sets none on `crawler serve`.
    `upper` bounds a number wherever it is given (flag, request, template).
    """

    dest: str
    help: str
    default: Any = None
    value: ValueType | None = TEXT
    flag: str = ""
    beam_name: str = ""
    action: str | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    cli: bool = True
    template: bool = True
    label: str = ""
    regex: str | None = None  # the template's check, when stricter than the value type's
    param_type: str | None = None
    template_required: bool = False  # required in a template job despite a local default
    per_crawl: bool = False
    serve: bool = True
    api_name: str = ""
    api_required: bool = False
    upper: float | None = None

    def __post_init__(self) -> None:
        if self.per_crawl:  # a job serving many crawls has no such option
            object.__setattr__(self, "template", False)
        if not self.flag:
            object.__setattr__(self, "flag", "--" + self.dest.replace("_", "-"))
        if not self.beam_name:
            object.__setattr__(self, "beam_name", self.dest)
        if not self.label:
            object.__setattr__(self, "label", self.dest.replace("_", " ").capitalize())
        if not self.api_name:
            object.__setattr__(self, "api_name", self.dest)

    def parse(self, text: str) -> Any:
        """The option's value from its text, or argparse.ArgumentTypeError saying why not."""
        value = text if self.value is None else self.value.parse(text)
        if self.choices is not None and value not in self.choices:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not one of {', '.join(self.choices)}")
        if self.upper is not None and value > self.upper:
            raise argparse.ArgumentTypeError(f"must be at most {self.upper:g}, got {value}")
        return value

    def check(self, value: Any) -> Any:
        """`value` if it is one the option takes, else ValueError naming the flag and why
        (the same words as on the command line)."""
        try:
            return self.parse(value if isinstance(value, str) else str(value))
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"{self.flag}: {exc}") from None

    @property
    def beam_flag(self) -> str:
        if self.action == "store_false":
            return "--no_" + self.beam_name
        return "--" + self.beam_name

    @property
    def help_text(self) -> str:
        """The help with its default filled in, as the template shows it."""
        if self.template_required:
            return self.description
        return self.help % {"default": self.default}

    @property
    def description(self) -> str:
        """The help without its `(default: ...)` (a table shows the default apart)."""
        return self.help.removesuffix(" " + _D) % {"default": self.default}

    @property
    def template_regex(self) -> str:
        if self.regex is not None:
            return self.regex
        if self.choices is not None:
            return "^(?:" + "|".join(re.escape(choice) for choice in self.choices) + ")$"
        assert self.value is not None, f"{self.dest}: a template option needs a value type"
        return self.value.regex

    def add_to(self, parser: argparse.ArgumentParser, flags: Iterable[str], dest: str) -> None:
        kwargs: dict[str, Any] = {"dest": dest, "default": self.default, "help": self.help}
        if self.action is not None:
            kwargs["action"] = self.action
        if self.action not in ("store_true", "store_false"):
            if self.value is not None and self.value.parse is not str:
                kwargs["type"] = self.parse
            if self.choices is not None:
                kwargs["choices"] = self.choices
            if self.metavar is not None:
                kwargs["metavar"] = self.metavar
        parser.add_argument(*flags, **kwargs)


_D = "(default: %(default)s)"

OPTIONS: tuple[Option, ...] = (
    # --- Where the crawl goes
    Option("out", "output root: WARC/WET segments and the Parquet `pages` table go under "
           f"OUT/CRAWL_ID/; a job on Google Cloud needs gs://bucket/prefix {_D}",
           default="crawl-out", label="Output root", template_required=True,
           regex=r"^gs://[a-z0-9][-_.a-z0-9]{1,220}[a-z0-9](?:/.*)?$",
           param_type="GCS_WRITE_FOLDER"),
    Option("crawl_id", "name of this crawl: its directory under --out, its record and its "
           "rows; with --resume, the crawl to continue (default: c<UTC date-time>-<random>)",
           label="Crawl id", template=False, serve=False),
    # --- Budgets and scope
    Option("max_pages", "global page budget: at most this many pages are requested; the rest "
           f"end `over_budget` {_D}", default=10_000, value=POSITIVE_INT,
           per_crawl=True,
           api_required=True, upper=10**12, serve=False),
    Option("max_pages_per_host", "per-host page budget; also sizes each host's seen-set "
           "(default: no limit beyond --max-pages)", value=POSITIVE_INT,
           per_crawl=True, upper=10**12),
    Option("max_depth", "links more than this many hops from a seed end `filtered` "
           "(default: no limit)", value=NON_NEGATIVE_INT,
           per_crawl=True, upper=10_000),
    Option("scope", "which hosts links are followed to: `all` (any host), `same-host` (a "
           "seed's host and port) or `same-domain` (a seed's registered domain, its public "
           "suffix and one label: www.example.co.uk keeps shop.example.co.uk; a.github.io "
           "keeps neither b.github.io nor github.io). Other URLs end `filtered` with reason "
           "`out of scope (RULE)` and are never requested, nor their host's robots.txt or "
           f"address {_D}", default="all", choices=SCOPE_RULES, per_crawl=True),
    Option("include", "a URL is in scope only if one --include regex matches it (RE2, "
           "searched in the normalised URL); repeatable. Checked after --scope, before "
           "--exclude; seeds too. Failing URLs end `filtered`, `out of scope (include)` "
           "(default: none, every URL)", default=[], action="append", metavar="REGEX",
           value=PATTERN, per_crawl=True, serve=False),
    Option("exclude", "a URL that any --exclude regex matches is out of scope (RE2, "
           "searched in the normalised URL); repeatable. Checked last; seeds too. Such URLs "
           "end `filtered`, `out of scope (exclude)` (default: none)", default=[],
           action="append", metavar="REGEX", value=PATTERN, per_crawl=True, serve=False),
    Option("sitemaps", "read the sitemaps each in-scope host's robots.txt lists (its "
           "Sitemap: lines, sitemap indexes, gzip-compressed sitemaps): the pages they list "
           "join the frontier one hop from the seeds, in scope and new to their host's "
           "seen-set like any link. A sitemap is fetched as a request of its host, under the "
           "host's delay, robots.txt rules and address checks, ends in one row (`fetched`, "
           "what it listed; `failed`, why) and counts against --max-pages and "
           "--max-pages-per-host as a page does: unlike robots.txt, one per host a day, an "
           "index can list thousands. The protocol's 50,000 URLs and 50 MB per file are cut "
           "and counted (default: off, a crawl follows links only and asks a host for "
           "robots.txt and pages alone)", default=False, action="store_true", value=FLAG,
           per_crawl=True),
    Option("max_calendar_pages", "calendar-like URLs (a year and month in the path or a date "
           "in the query) accepted per host before the rest end `filtered` as a trap "
           f"{_D}", default=100, value=POSITIVE_INT),
    Option("max_redirect_hops", "a redirect chain longer than this many hops ends `filtered` "
           f"{_D}", default=5, value=NON_NEGATIVE_INT),
    # --- Politeness
    Option("min_delay", "seconds between two requests to one host, at least; robots.txt "
           f"Crawl-delay and backoff can only make it longer {_D}", default=1.0,
           value=POSITIVE_FLOAT,
           per_crawl=True, upper=86_400),
    Option("max_crawl_delay", "cap on a robots.txt Crawl-delay, in seconds; a capped host is "
           f"logged {_D}", default=30.0, value=POSITIVE_FLOAT),
    Option("slow_factor", "a host waits at least this many times its last response time "
           "before its next request, so a slow server gets room before it fails; 0 turns it "
           f"off {_D}", default=2.0, value=NON_NEGATIVE_FLOAT),
    Option("politeness_key", "what one delay and one request in flight are kept for: `host` "
           "(a host and its port, the unit robots.txt governs) or `domain` (every host and port "
           "of one registered domain, public suffix + 1, as Nutch's and StormCrawler's byDomain "
           "modes: for sites spread over many subdomains, at the cost of crawling them one "
           "request at a time). The job's, not a crawl's: host state is keyed once per job and "
           "politeness holds across every crawl it serves, so crawls cannot mix keys. "
           "robots.txt, the page budget per host and each server's backoff stay per host "
           f"under either {_D}",
           default="host", choices=POLITENESS_KEYS,
           regex=r"^(host|domain)$"),
    Option("user_agent", "User-Agent header, and the product token robots.txt groups are "
           f"matched against {_D}", default=DEFAULT_USER_AGENT,
           # Beam's SetupOptions has its own --user_agent (for Google API calls).
           beam_name="crawler_user_agent", label="User agent",
           per_crawl=True, value=HEADER_TEXT),
    Option("resolve", "like curl: connect to ADDRESS for HOST:PORT instead of asking DNS; "
           "HOST may be *.suffix and PORT may be *; repeatable. A mapped host may be reached "
           "at ADDRESS even when it is not public", default=[],
           action="append", metavar="HOST:PORT:ADDRESS", template=False),
    Option("allow_networks", "let the crawler connect to this non-public range (e.g. "
           "10.20.0.0/16 for an intranet crawl); repeatable. By default every connection to "
           "a loopback, private, link-local (cloud metadata), carrier-grade NAT, multicast, "
           "reserved or documentation address is refused, however the URL reached the "
           "crawler (link, redirect, robots.txt, DNS answer), and the URL ends `filtered`: "
           "any page could otherwise aim the crawler at internal services (docs/security.md)",
           default=[], flag="--allow-network", action="append", metavar="CIDR",
           # A fleet crawls the public web; an intranet crawl runs on a machine inside it.
           template=False),
    # --- Fetching
    Option("fetch_timeout", "total seconds one request may take (connect, headers, body) "
           f"before it counts as a timeout {_D}", default=30.0, value=POSITIVE_FLOAT),
    Option("connect_timeout", "seconds to wait for a connection, within --fetch-timeout "
           f"{_D}", default=10.0, value=POSITIVE_FLOAT),
    Option("max_body_bytes", "bodies are truncated past this many decoded bytes; the record "
           f"says so {_D}", default=10 * 1024 * 1024, value=POSITIVE_INT),
    Option("max_attempts", "a URL whose fetch fails transiently (timeout, 429, 5xx) is tried "
           f"this many times, with host backoff between, then ends `failed` {_D}",
           default=3, value=POSITIVE_INT),
    Option("fetch_concurrency", "requests in flight at once across all hosts in one process "
           f"(on Dataflow: per worker) {_D}", default=128, value=POSITIVE_INT),
    Option("lease_grace", "seconds a fetch's lease outlives --fetch-timeout; a lease whose "
           "fetch no process holds any more (a worker died) expires after it and the URL is "
           f"fetched again {_D}", default=10.0, value=POSITIVE_FLOAT),
    Option("retry_base", "seconds a host waits after its first transient failure; doubled "
           "per consecutive failure, jittered, capped at --retry-cap, never less than a "
           f"Retry-After {_D}", default=2.0, value=POSITIVE_FLOAT),
    Option("retry_cap", "longest backoff after failures, in seconds; also caps a Retry-After "
           f"{_D}", default=600.0, value=POSITIVE_FLOAT),
    Option("circuit_failures", "consecutive failed requests after which a host is parked "
           f"{_D}", default=10, value=POSITIVE_INT),
    Option("circuit_seconds", f"how long a parked host waits before one probe request {_D}",
           default=3600.0, value=POSITIVE_FLOAT),
    # --- Host state
    Option("host_queue_cap", "URLs a host's state holds; more wait in overflow chunks in "
           f"Bigtable and come back in order as the queue empties {_D}", default=2000,
           value=POSITIVE_INT),
    Option("bloom_fp_rate", "false-positive rate of each host's seen-set: the chance that a "
           "new URL is taken for one already seen and skipped; the seen-set grows with the "
           "URLs offered and keeps this rate up to 32 MiB per host and crawl, past which the "
           f"URLs it drops are counted (urls_seen_at_ceiling) {_D}", default=1e-4,
           value=FRACTION, label="Bloom false-positive rate"),
    Option("priority", "order of each host's queue: MODULE:FUNCTION names a function "
           "(url, depth, source) -> number, source `seed`, `link` or `sitemap`, called once "
           "per URL when its host accepts it; a higher number is fetched sooner, equal ones in "
           "arrival order, and past the queue cap the lowest wait in overflow. It never "
           "changes politeness (one request per host at a time, the delay, robots.txt). A "
           "URL it raises on or answers with no number gets 0 and is counted "
           "(`priority_errors`). It names code, so it is the operator's (not a POST /crawls "
           "field); the module must be importable where the crawl runs, on Dataflow in the "
           "worker image (docs/deploy.md); a path that names no function is refused before "
           "the crawl starts (default: none, first in, first out)",
           metavar="MODULE:FUNCTION", label="Priority hook",
           regex=r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$"),
    # --- Parsing and content
    Option("extractor", f"{extractor_help()} {_D}", default=DEFAULT_EXTRACTOR,
           choices=EXTRACTORS, param_type="ENUM"),
    Option("parse_attempts", "a page whose parsing raises is tried this many times, then "
           f"recorded `dead_lettered` and published as a dead letter {_D}", default=3,
           value=POSITIVE_INT),
    Option("near_duplicate_bits", "a fetched page whose text's 64-bit simhash is within this "
           f"many bits of an earlier page of its host gets `near_duplicate_of` {_D}",
           default=3, value=NON_NEGATIVE_INT, regex=r"^(?:[0-9]|1[0-6])$", upper=16),
    Option("duplicate_window", "a host's last this many pages with text decide whether it "
           f"serves mostly duplicates {_D}", default=20, value=POSITIVE_INT),
    Option("duplicate_slowdown", "a host whose recent pages are mostly duplicates (half of "
           "its last --duplicate-window pages with text) waits this many times its delay "
           f"between requests until its pages are distinct again {_D}", default=4.0,
           value=POSITIVE_FLOAT, regex=r"^(?:[0-9]*[1-9][0-9]*(?:\.[0-9]*)?)$"),
    # --- Stores and cloud resources
    Option("project", "Google Cloud project of the Pub/Sub topics and Bigtable instance; on "
           "Dataflow it is also the job's project, Beam's own --project "
           f"(default: {LOCAL_PROJECT}, which the local emulators accept)", template=False),
    Option("bigtable_instance", "Bigtable instance for page rows, the crawl record and the "
           "shared page budget; locally the emulator is started unless "
           f"BIGTABLE_EMULATOR_HOST is set {_D}", default="local",
           regex=r"^[a-z][-a-z0-9]{4,31}[a-z0-9]$", template_required=True),
    Option("pages_table", f"Bigtable table of page rows {_D}", default=RESOURCES.pages_table,
           regex=r"^[-_.a-zA-Z0-9]{1,50}$"),
    Option("crawls_table", f"Bigtable table of crawl records and counters {_D}",
           default=RESOURCES.crawls_table, regex=r"^[-_.a-zA-Z0-9]{1,50}$"),
    Option("frontier_table", f"Bigtable table of host queue overflow chunks {_D}",
           default=RESOURCES.frontier_table, regex=r"^[-_.a-zA-Z0-9]{1,50}$"),
    Option("bigquery_table", "also stream page rows to this BigQuery table (created if "
           "missing, partitioned by fetch day, clustered by host)",
           metavar="PROJECT:DATASET.TABLE", label="BigQuery table",
           regex=r"^(?:[a-z0-9][-.a-z0-9]*[a-z0-9]:)?[a-z][-a-z0-9]{4,28}[a-z0-9][:.]"
                 r"[A-Za-z0-9_]{1,1024}\.[-A-Za-z0-9_]{1,1024}$", serve=False),
    # A local crawl names its topics after itself (frontier-CRAWL_ID, a fresh subscription
    # per run); these name the fleet's.
    Option("frontier_subscription", "Pub/Sub subscription the job reads frontier batches "
           f"from {_D}", default=RESOURCES.frontier_subscription, cli=False,
           regex=r"^[A-Za-z][-A-Za-z0-9_.~+%]{2,254}$", serve=False),
    Option("frontier_topic", f"Pub/Sub topic the seeds and discovered links go to {_D}",
           default=RESOURCES.frontier_topic, cli=False,
           regex=r"^[A-Za-z][-A-Za-z0-9_.~+%]{2,254}$"),
    Option("dead_letter_topic", "Pub/Sub topic of pages no parse attempt could handle "
           f"{_D}", default=RESOURCES.dead_letter_topic, cli=False,
           regex=r"^[A-Za-z][-A-Za-z0-9_.~+%]{2,254}$", serve=False),
    Option("events_topic", f"Pub/Sub topic of page-crawled events {_D}",
           default=RESOURCES.events_topic, cli=False,
           regex=r"^[A-Za-z][-A-Za-z0-9_.~+%]{2,254}$", serve=False),
    Option("budget_block", "pages each process claims at a time from the shared page budget "
           "in Bigtable: one read-modify-write per block; at most block - 1 pages per "
           f"process stay unused when the budget runs out {_D}", default=16,
           value=POSITIVE_INT),
    Option("row_shards", "keys the row sinks (Parquet part files, BigQuery inserts) spread "
           "their batches over, so that no one key carries every row of the job; 0: "
           "ROWS_SHARDS_PER_WORKER (4) per worker of --max_num_workers (else --num_workers, "
           "else 400, as for 100 workers), so the writers grow with the job; a crawl on one "
           f"machine uses 2 {_D}", default=0, value=NON_NEGATIVE_INT,
           cli=False, serve=False),
    # --- Running on this machine
    Option("resume", "continue crawl --crawl-id under --out from what it stored (after a "
           "crash or kill): done URLs are not fetched again, links of stored pages are "
           "crawled; seeds default to the crawl's own", default=False, action="store_true",
           value=None, template=False, serve=False),
    Option("redrive", "with --resume: first move the crawl's kept dead letters back onto "
           "its frontier, so their stored responses are parsed again by this (fixed) "
           "version; see `crawler redrive`", default=False, action="store_true", value=None,
           template=False, serve=False),
    # Local only: a fleet job serves many crawls, and one crawl's time budget is not the job's.
    Option("max_duration", "time budget in seconds, counted from the command's start: then no "
           "new request is sent and every URL still waiting (host queues, overflow, the "
           "frontier) ends `over_budget` with reason `time budget`; requests under way get at "
           "most 5 s more, so the crawl ends with its summary within about 30 s of it "
           "(default: none, the crawl runs until drained or out of pages)",
           value=POSITIVE_FLOAT, metavar="SECONDS", template=False,
           per_crawl=True,
           api_name="max_duration_s", upper=365 * 86_400),
    Option("status_port", "while the crawl runs, serve its status page (the page `crawler "
           "serve` shows, with pause, resume and cancel) on 127.0.0.1 at this port, 0 for a "
           "free one; the page asks for the token printed when the crawl starts (default: no "
           "page)", value=NON_NEGATIVE_INT, upper=65535, metavar="PORT", template=False,
           serve=False),
    Option("progress", "do not draw the progress line (for logs and CI)", default=True,
           flag="--no-progress", action="store_false", value=None, template=False, serve=False),
    Option("workers", "processes that run the crawl on this machine, each scheduling its own "
           "share of the politeness keys (hosts, or domains with --politeness-key domain), so "
           "that every key is asked by one process; 1 runs the crawl in this process alone "
           "(default: one per core, as os.cpu_count() counts them, since parsing pages needs "
           "a core and one process uses one; a program calling run_local_crawl without it "
           "gets 1)", value=POSITIVE_INT, upper=256, metavar="N", template=False, serve=False),
)

_BY_DEST = {option.dest: option for option in OPTIONS}
PER_CRAWL = tuple(option.dest for option in OPTIONS if option.per_crawl)


def option(dest: str) -> Option:
    return _BY_DEST[dest]


class CrawlPipelineOptions(PipelineOptions):
    """The crawl's options as Beam pipeline options (`--max_pages`, or `--max-pages`)."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        # One parser holds every options class when Beam lists all options (the Dataflow
        # runner does, to send them with the job): a flag another class already declares
        # (Beam's --project) is that class's; CrawlOptions reads it from there.
        taken = {flag for action in parser._actions for flag in action.option_strings}
        for opt in OPTIONS:
            flags = [flag for flag in dict.fromkeys((opt.beam_flag, opt.flag))
                     if flag not in taken]
            if flags:
                opt.add_to(parser, flags, opt.beam_name)


def add_crawl_arguments(parser: argparse.ArgumentParser) -> None:
    """The `crawler crawl` arguments: the seeds, then every option of OPTIONS marked cli."""
    parser.add_argument("seeds", nargs="*", metavar="URL", help="seed URLs to start from")
    parser.add_argument("--seeds-file", type=Path,
                        help="file with one seed URL per line (# starts a comment)")
    for opt in OPTIONS:
        if opt.cli:
            opt.add_to(parser, [opt.flag], opt.dest)


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """`crawler serve`'s crawl options: every option of OPTIONS marked serve. The fleet's own
    knobs configure the local fleet; a crawl's own limits are the default of a crawl that
    starts without one (POST /crawls)."""
    for opt in OPTIONS:
        if not opt.serve:
            continue
        if opt.per_crawl:
            help_text = ("for a crawl started without " + opt.api_name + ": " + opt.help)
            dataclasses.replace(opt, help=help_text).add_to(parser, [opt.flag], opt.dest)
        else:
            opt.add_to(parser, [opt.flag], opt.dest)


def serve_options(args: argparse.Namespace) -> CrawlOptions:
    """CrawlOptions from `crawler serve`'s parsed arguments (add_serve_options)."""
    values = {opt.dest: getattr(args, opt.dest) for opt in OPTIONS if opt.serve}
    # No crawl of the API's goes without its own page budget (the API requires one).
    return CrawlOptions.from_values({**values, "max_pages": None}, ())


@dataclass(frozen=True)
class CrawlOptions:
    """The typed view of a crawl's options, and the value objects the transforms take.

    Built from the command line (options_from_args) or from Beam pipeline options
    (from_pipeline_options); defaults are OPTIONS' (a test keeps them equal)."""

    seeds: tuple[str, ...]
    out: str = "crawl-out"
    crawl_id: str = field(default_factory=new_crawl_id)
    max_pages: int | None = 10_000
    max_pages_per_host: int | None = None
    max_depth: int | None = None
    scope: str = "all"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    sitemaps: bool = False
    max_calendar_pages: int | None = 100
    max_redirect_hops: int = 5
    min_delay: float = 1.0
    max_crawl_delay: float = 30.0
    slow_factor: float = 2.0
    politeness_key: str = "host"
    user_agent: str = DEFAULT_USER_AGENT
    resolve: tuple[str, ...] = ()
    allow_networks: tuple[str, ...] = ()  # --allow-network: non-public ranges allowed
    fetch_timeout: float = 30.0
    connect_timeout: float = 10.0
    max_body_bytes: int = 10 * 1024 * 1024
    max_attempts: int = 3
    fetch_concurrency: int = 128
    lease_grace: float = 10.0
    retry_base: float = 2.0
    retry_cap: float = 600.0
    circuit_failures: int = 10
    circuit_seconds: float = 3600.0
    host_queue_cap: int = 2000
    bloom_fp_rate: float = 1e-4
    priority: str | None = None  # --priority MODULE:FUNCTION (pipeline.core.priority)
    extractor: str = DEFAULT_EXTRACTOR
    parse_attempts: int = 3
    near_duplicate_bits: int = 3
    duplicate_window: int = 20
    duplicate_slowdown: float = 4.0
    project: str = LOCAL_PROJECT
    bigtable_instance: str = "local"
    pages_table: str = RESOURCES.pages_table
    crawls_table: str = RESOURCES.crawls_table
    frontier_table: str = RESOURCES.frontier_table
    bigquery_table: str | None = None
    frontier_subscription: str = RESOURCES.frontier_subscription
    frontier_topic: str = RESOURCES.frontier_topic
    dead_letter_topic: str = RESOURCES.dead_letter_topic
    events_topic: str = RESOURCES.events_topic
    budget_block: int = 16
    row_shards: int = 0
    resume: bool = False
    redrive: bool = False
    status_port: int | None = None
    progress: bool = True
    workers: int | None = None  # None: one process (`crawler crawl` fills in the cores)
    # Time budget: seconds from started_at (when the command started, or else when these
    # options were made) after which fetching stops and every waiting URL ends over budget.
    max_duration: float | None = None
    started_at: float = field(default_factory=time.time, compare=False)

    def __post_init__(self) -> None:
        # Every value against its declaration (the value type's range, the upper bound, the
        # choices), each item of a repeatable one: the same words as the command line gives.
        for opt in OPTIONS:
            value = getattr(self, opt.dest)
            if value is None or opt.action not in (None, "append"):
                continue
            for item in (value if opt.action == "append" else (value,)):
                if opt.choices is not None and item not in opt.choices:
                    raise ValueError(
                        f"{opt.flag} {item!r}: use one of {', '.join(opt.choices)}")
                opt.check(item)
        for spec in self.resolve:
            parse_resolve(spec)  # raises ValueError naming the expected form
        for spec in self.allow_networks:
            try:
                parse_network(spec)
            except ValueError as exc:
                raise ValueError(f"--allow-network: {exc}") from None
        if not _CRAWL_ID.fullmatch(self.crawl_id):
            raise ValueError(
                f"--crawl-id {self.crawl_id!r}: use 1-64 letters, digits, '.', '_' or '-' "
                "(it names topics, directories and Bigtable row keys)")
        if self.duplicate_slowdown < 1:
            raise ValueError("--duplicate-slowdown must be at least 1")
        if self.priority is not None:
            PriorityHook(self.priority).check()  # before anything is fetched, in one line

    @classmethod
    def from_pipeline_options(cls, options: PipelineOptions,
                              seeds: tuple[str, ...] = ()) -> CrawlOptions:
        """The crawl's options as a job's pipeline options carry them (Beam's --project is
        the crawl's project)."""
        view = options.view_as(CrawlPipelineOptions)
        values = {opt.dest: getattr(view, opt.beam_name) for opt in OPTIONS}
        values["project"] = options.view_as(GoogleCloudOptions).project
        return cls.from_values(values, seeds)

    @classmethod
    def from_values(cls, values: dict[str, Any], seeds: tuple[str, ...]) -> CrawlOptions:
        """From option dests to values, as a parser leaves them (None: the default)."""
        kwargs: dict[str, Any] = {}
        for opt in OPTIONS:
            if opt.dest not in values:
                continue
            value = values[opt.dest]
            if value is None and opt.dest in _DEFAULTED:
                continue
            if isinstance(value, list):
                value = tuple(value)
            kwargs[opt.dest] = value
        return cls(seeds=tuple(seeds), **kwargs)

    def limits(self) -> CrawlLimits:
        """What this crawl may do, as its record keeps it."""
        return CrawlLimits(
            max_pages=self.max_pages or MAX_PAGES_UNBOUNDED,
            max_pages_per_host=self.max_pages_per_host, max_depth=self.max_depth,
            min_delay=self.min_delay, max_duration_s=self.max_duration,
            user_agent=self.user_agent, scope=self.scope, include=self.include,
            exclude=self.exclude, sitemaps=self.sitemaps,
        )

    def host_policy(self) -> HostPolicy:
        budget = self.max_pages_per_host or self.max_pages or 100_000
        return HostPolicy(
            user_agent=self.user_agent,
            min_delay=self.min_delay,
            max_crawl_delay=max(self.max_crawl_delay, self.min_delay),
            fetch_timeout=self.fetch_timeout,
            lease_grace=self.lease_grace,
            max_depth=self.max_depth,
            max_pages_per_host=self.max_pages_per_host,
            max_attempts=self.max_attempts,
            retry_base=self.retry_base,
            retry_cap=self.retry_cap,
            max_redirect_hops=self.max_redirect_hops,
            queue_cap=self.host_queue_cap,
            max_calendar_pages=self.max_calendar_pages,
            slow_factor=self.slow_factor,
            circuit_failures=self.circuit_failures,
            circuit_seconds=self.circuit_seconds,
            # A host's seen-set holds every URL it is offered, about 4x the pages it may fetch
            # on link-dense sites; sizing its first slice from the host budget keeps state
            # kilobytes, and it grows in larger slices past that (pipeline.core.bloom).
            bloom_capacity=min(4 * budget, 1_000_000),
            bloom_fp_rate=self.bloom_fp_rate,
            duplicate_slowdown=self.duplicate_slowdown,
            priority=PriorityHook(self.priority) if self.priority is not None else None,
        )

    def duplicate_policy(self) -> DuplicatePolicy:
        defaults = DuplicatePolicy()
        return DuplicatePolicy(
            bits=self.near_duplicate_bits,
            window=self.duplicate_window,
            # A host is never judged on fewer pages than its window holds.
            min_pages=min(defaults.min_pages, self.duplicate_window),
        )

    def bigtable_config(self) -> BigtableConfig:
        return BigtableConfig(
            project=self.project, instance=self.bigtable_instance, pages_table=self.pages_table,
            crawls_table=self.crawls_table, frontier_table=self.frontier_table,
        )

    def fetch_config(self) -> FetchConfig:
        return FetchConfig(
            user_agent=self.user_agent,
            timeout=self.fetch_timeout,
            connect_timeout=min(self.connect_timeout, self.fetch_timeout),
            max_body_bytes=self.max_body_bytes,
            allow_networks=self.allow_networks,
        )


# Fields whose None means "not given": the dataclass default applies (crawl ids are made up
# per crawl; the project defaults to the emulators' when neither flag declares one).
_DEFAULTED = frozenset({"crawl_id", "project"})


def options_from_args(args: argparse.Namespace) -> CrawlOptions:
    """CrawlOptions from `crawler crawl`'s parsed arguments (add_crawl_arguments)."""
    seeds = list(args.seeds)
    if args.seeds_file is not None:
        try:
            lines = args.seeds_file.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ValueError(f"cannot read --seeds-file {args.seeds_file}: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise ValueError(f"--seeds-file {args.seeds_file} is not UTF-8 text (byte "
                             f"{exc.start}: {exc.reason}): it should hold one URL a "
                             "line") from None
        seeds.extend(line.strip() for line in lines
                     if line.strip() and not line.lstrip().startswith("#"))
    if args.resume and not args.crawl_id:
        raise ValueError("--resume needs --crawl-id (the directory name under --out)")
    if args.redrive and not args.resume:
        raise ValueError("--redrive goes with --resume (it continues an existing crawl)")
    values = {opt.dest: getattr(args, opt.dest) for opt in OPTIONS if opt.cli}
    opts = CrawlOptions.from_values(values, tuple(seeds))
    if getattr(args, "started_at", None) is not None:  # set by the `crawler` command
        opts = dataclasses.replace(opts, started_at=args.started_at)
    return opts


# --- Generated files ---------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
METADATA_PATH = Path("templates/metadata.json")
OPTIONS_DOC_PATH = Path("docs/options.md")
README_PATH = Path("README.md")
README_BEGIN = "<!-- options table: generated by `python -m pipeline.options --write` -->"
README_END = "<!-- end of options table -->"
# The options README.md shows; docs/options.md has all of them.
README_OPTIONS = ("max_pages", "max_pages_per_host", "max_depth", "scope", "include", "exclude",
                  "sitemaps",
                  "min_delay", "politeness_key", "resolve",
                  "allow_networks", "user_agent", "extractor", "host_queue_cap",
                  "priority", "max_duration")


def template_metadata() -> dict[str, Any]:
    """The Flex Template's metadata.json: one parameter per template option."""
    parameters = []
    for opt in OPTIONS:
        if not opt.template:
            continue
        parameter: dict[str, Any] = {
            "name": opt.beam_name,
            "label": opt.label,
            "helpText": opt.help_text,
            "isOptional": not opt.template_required,
            "regexes": [opt.template_regex],
            "paramType": opt.param_type or (opt.value.param_type if opt.value else "TEXT"),
        }
        if opt.choices is not None:
            parameter["enumOptions"] = [{"value": choice} for choice in opt.choices]
        if opt.default is not None and not opt.template_required:
            parameter["defaultValue"] = str(opt.default)
        parameters.append(parameter)
    return {
        "name": TEMPLATE_NAME,
        "description": TEMPLATE_DESCRIPTION,
        "streaming": True,
        "parameters": parameters,
    }


def _default_cell(opt: Option) -> str:
    if opt.dest == "project":
        return LOCAL_PROJECT
    if opt.action == "store_true":
        return "off"
    if opt.action == "store_false":
        return "on"
    if opt.default in (None, []):
        return ""
    return f"`{opt.default}`"


def _spelling(opt: Option) -> str:
    metavar = f" {opt.metavar}" if opt.metavar and opt.action == "append" else ""
    if opt.cli:
        return f"`{opt.flag}{metavar}`"
    return f"`{opt.beam_flag}`"


def options_table(dests: Iterable[str] | None = None) -> str:
    """A markdown table of options: flag, default, help (the help's own words)."""
    chosen = [option(d) for d in dests] if dests is not None else list(OPTIONS)
    lines = ["| option | default | what it does |", "|---|---|---|"]
    for opt in chosen:
        text = opt.description.replace("|", "\\|")
        lines.append(f"| {_spelling(opt)} | {_default_cell(opt)} | {text} |")
    return "\n".join(lines) + "\n"


def options_doc() -> str:
    where = {True: "yes", False: "no"}
    lines = [
        "# Options",
        "",
        "Generated from `pipeline/options.py` by `python -m pipeline.options --write`; edit "
        "the help texts there.",
        "",
        "Every option is one entry of `OPTIONS`. `crawler crawl` spells it with dashes "
        "(`--max-pages`); `python -m pipeline.main` and the Flex Template take Beam's spelling "
        "(`--max_pages`, the template parameter's name), and the launcher also accepts the "
        "dashed one. Options marked *crawl* no are the fleet's own (a local crawl names its "
        "topics and subscription after itself); options marked *template* no only make sense "
        "on one machine or belong to Beam.",
        "",
        "| option | Beam / template name | crawl | template | default | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for opt in OPTIONS:
        text = opt.description.replace("|", "\\|")
        beam = f"`{opt.beam_flag}`" if opt.dest != "project" else "`--project` (Beam's)"
        lines.append(f"| `{opt.flag}` | {beam} | {where[opt.cli]} | {where[opt.template]} | "
                     f"{_default_cell(opt)} | {text} |")
    return "\n".join(lines) + "\n"


def readme_with_table(readme: str) -> str:
    """README.md with its options table regenerated between the markers."""
    begin, end = readme.find(README_BEGIN), readme.find(README_END)
    if begin < 0 or end < begin:
        raise ValueError(f"README.md lacks the markers {README_BEGIN!r} ... {README_END!r}")
    return (readme[:begin + len(README_BEGIN)] + "\n\n" + options_table(README_OPTIONS)
            + "\n" + readme[end:])


def generated_files(root: Path = ROOT) -> dict[Path, str]:
    """Every file generated from OPTIONS, path -> content."""
    return {
        METADATA_PATH: json.dumps(template_metadata(), indent=2, ensure_ascii=False) + "\n",
        OPTIONS_DOC_PATH: options_doc(),
        README_PATH: readme_with_table((root / README_PATH).read_text(encoding="utf-8")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.options",
        description="Print or write the files generated from the crawl's options.")
    parser.add_argument("--metadata", action="store_true", help="print templates/metadata.json")
    parser.add_argument("--docs", action="store_true", help="print docs/options.md")
    parser.add_argument("--write", action="store_true",
                        help="write metadata.json, docs/options.md and README.md's table")
    args = parser.parse_args(argv)
    files = generated_files()
    if args.write:
        for path, content in files.items():
            (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
            (ROOT / path).write_text(content, encoding="utf-8")
            print(f"wrote {path}")
    if args.metadata:
        sys.stdout.write(files[METADATA_PATH])
    if args.docs:
        sys.stdout.write(files[OPTIONS_DOC_PATH])
    if not (args.write or args.metadata or args.docs):
        parser.print_help()
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
