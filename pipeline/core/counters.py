"""The names of the crawl's counters: one enum, so a misspelt counter is an AttributeError where
it is written, not a number that silently stays at zero where it is read.

The stages count through `pipeline.metrics.crawl_counter(Counter.X)`; the local progress
arithmetic and the summary read the same members back. This module only names them.
"""

from __future__ import annotations

from enum import StrEnum

from pipeline.core.records import BatchKind, HostSignalKind, PageState
from pipeline.core.segment_records import RecordProblem
from pipeline.core.urls import RejectReason


class Counter(StrEnum):
    """Every counter a stage increments (Beam metric names in the `crawler` namespace)."""

    # ReadFrontier
    BATCHES_RECEIVED = "batches_received"
    BATCHES_MALFORMED = "batches_malformed"
    URLS_DECODED = "urls_decoded"
    URLS_INVALID = "urls_invalid"
    URLS_REDRIVEN = "urls_redriven"
    # Publishing to the frontier (one per message kind that goes round the loop)
    BATCHES_PUBLISHED_LINKS = "batches_published_links"
    BATCHES_PUBLISHED_SPILL = "batches_published_spill"
    BATCHES_PUBLISHED_SEEDS = "batches_published_seeds"
    BATCHES_PUBLISHED_SITEMAP = "batches_published_sitemap"
    BATCHES_PUBLISHED_SITEMAP_DOCUMENTS = "batches_published_sitemap_documents"
    BATCHES_PUBLISHED_THROTTLE = "batches_published_throttle"
    BATCHES_PUBLISHED_RELEASE = "batches_published_release"
    BATCHES_PUBLISHED_DEAD_LETTER = "batches_published_dead_letter"
    BATCHES_PUBLISHED_PAGE_CRAWLED = "batches_published_page_crawled"
    BATCHES_PUBLISHED_ROBOTS_REQUEST = "batches_published_robots_request"
    BATCHES_PUBLISHED_ROBOTS_ANSWER = "batches_published_robots_answer"
    BATCHES_PUBLISHED_WAKE = "batches_published_wake"
    # Every kind, per crawl: the far side of BATCHES_RECEIVED in the crawl's balance
    BATCHES_PUBLISHED = "batches_published"
    # ScheduleFetches
    URLS_OFFERED = "urls_offered"
    URLS_ACCEPTED = "urls_accepted"
    REQUESTS = "requests"
    ROBOTS_REQUESTS = "robots_requests"
    HOSTS_ACTIVATED = "hosts_activated"
    HOSTS_IDLED = "hosts_idled"
    LEASES_EXPIRED = "leases_expired"
    HOSTS_THROTTLED_FOR_DUPLICATES = "hosts_throttled_for_duplicates"
    URLS_OVERFLOWED = "urls_overflowed"
    # Dropped as seen by a seen-set past its byte ceiling, whose false-positive rate rises
    # above --bloom-fp-rate: at most this many new URLs lost (pipeline.core.bloom)
    URLS_SEEN_AT_CEILING = "urls_seen_at_ceiling"
    OVERFLOW_URLS_LOST = "overflow_urls_lost"
    URLS_BLOCKED_ADDRESS = "urls_blocked_address"  # ended filtered: address not public
    ROBOTS_MESSAGES_EMITTED = "robots_messages_emitted"  # requests and answers between hosts
    HOSTS_PARKED = "hosts_parked"  # circuit opened, or a probe of a parked host failed
    URLS_OVER_TIME = "urls_over_time"  # ended `over_budget` when the time budget ran out
    URLS_OUT_OF_SCOPE = "urls_out_of_scope"  # ended `filtered`: outside the crawl's scope
    HOSTS_WOKEN = "hosts_woken"  # asleep with a crawl's URLs when it ended: woken to end them
    PRIORITY_ERRORS = "priority_errors"  # the --priority hook failed: default priority given
    # Gauges: moved up and down as hosts' circuits open and close with URLs waiting
    HOSTS_PARKED_NOW = "hosts_parked_now"
    URLS_ON_PARKED_HOSTS = "urls_on_parked_hosts"
    # StorePages
    PAGES_STORED = "pages_stored"
    LINK_BATCHES_EMITTED = "link_batches_emitted"
    BYTES_FETCHED = "bytes_fetched"
    DEAD_LETTERS = "dead_letters"
    DEAD_LETTERS_REPLAYED = "dead_letters_replayed"
    CONTENT_DUPLICATES = "content_duplicates"
    NEAR_DUPLICATES = "near_duplicates"
    HOST_SIGNALS_EMITTED = "host_signals_emitted"
    # Sitemaps read (--sitemaps): URLs they listed (pages and child sitemaps), URLs past the
    # protocol's limits, and sitemaps that gave no URLs (an HTTP error, refused, too large)
    SITEMAP_URLS_LISTED = "sitemap_urls_listed"
    SITEMAP_URLS_CUT = "sitemap_urls_cut"
    SITEMAPS_FAILED = "sitemaps_failed"
    # Links on stored pages that could not become URLs to crawl, per RejectReason
    # (see links_rejected)
    LINKS_REJECTED_SCHEME = "links_rejected_scheme"
    LINKS_REJECTED_RELATIVE = "links_rejected_relative"
    LINKS_REJECTED_HOST = "links_rejected_host"
    LINKS_REJECTED_PORT = "links_rejected_port"
    LINKS_REJECTED_BASE = "links_rejected_base"
    LINKS_REJECTED_MALFORMED = "links_rejected_malformed"
    LINKS_REJECTED_LENGTH = "links_rejected_length"
    # Readers of a crawl's segments
    SEGMENT_RESPONSE_RECORDS_READ = "segment_response_records_read"
    SEGMENT_CONVERSION_RECORDS_READ = "segment_conversion_records_read"
    # Records and files a reader did not pass on as good, per RecordProblem (see
    # segment_problem); each is also a dead letter of the reader
    SEGMENT_RECORDS_TRUNCATED = "segment_records_truncated"
    SEGMENT_RECORDS_CORRUPT = "segment_records_corrupt"
    SEGMENT_RECORDS_DIGEST_MISMATCH = "segment_records_digest_mismatch"
    SEGMENT_RECORDS_MALFORMED = "segment_records_malformed"
    SEGMENT_RECORDS_UNDECODABLE = "segment_records_undecodable"
    SEGMENT_RECORDS_UNUSABLE_URL = "segment_records_unusable_url"
    SEGMENT_FILES_EMPTY = "segment_files_empty"
    SEGMENT_FILES_NOT_WARC = "segment_files_not_warc"
    SEGMENT_FILES_UNREADABLE = "segment_files_unreadable"
    # Payloads a reader decoded (a Content-Encoding or chunked transfer left in the record)
    SEGMENT_PAYLOADS_DECODED = "segment_payloads_decoded"
    # MinHashDedup
    MINHASH_DOCUMENTS = "minhash_documents"
    MINHASH_DOCUMENTS_WITHOUT_WORDS = "minhash_documents_without_words"
    MINHASH_CANDIDATE_PAIRS = "minhash_candidate_pairs"
    MINHASH_VERIFIED_PAIRS = "minhash_verified_pairs"
    # FindNearCopies (documents are counted as MinHashDedup's, by the shared sketch step)
    NEAR_COPIES_FOUND = "near_copies_found"
    NEAR_COPY_ORIGINALS = "near_copy_originals"
    NEAR_COPY_REDELIVERIES = "near_copy_redeliveries"  # a document seen again in a bucket
    NEAR_COPY_CONFLICTING_IDS = "near_copy_conflicting_ids"  # one id, another text: ignored
    NEAR_COPY_LATE_MATCHES = "near_copy_late_matches"  # would have changed a decided verdict
    NEAR_COPY_BUCKET_EVICTIONS = "near_copy_bucket_evictions"  # forgotten over the cap
    NEAR_COPY_BUCKET_EXPIRIES = "near_copy_bucket_expiries"  # forgotten after the ttl
    # Sinks
    ROWS_WRITTEN = "rows_written"
    BIGTABLE_ROWS_WRITTEN = "bigtable_rows_written"
    BIGQUERY_ROWS_FAILED = "bigquery_rows_failed"
    # Terminal rows written, per state (see rows_in)
    ROWS_FETCHED = "rows_fetched"
    ROWS_REDIRECTED = "rows_redirected"
    ROWS_FAILED = "rows_failed"
    ROWS_DISALLOWED = "rows_disallowed"
    ROWS_FILTERED = "rows_filtered"
    ROWS_DUPLICATE = "rows_duplicate"
    ROWS_OVER_BUDGET = "rows_over_budget"
    ROWS_DEAD_LETTERED = "rows_dead_lettered"
    ROWS_CANCELLED = "rows_cancelled"


class Maximum(StrEnum):
    """Largest values observed (Beam distributions)."""

    DUE_LAG_MS = "due_lag_ms"
    NEAR_COPY_BUCKET_ENTRIES = "near_copy_bucket_entries"  # documents one band bucket holds
    NEAR_COPY_BUCKET_BYTES = "near_copy_bucket_bytes"  # bytes of one band bucket's state


# What a crawl's record counts, per crawl (pipeline.io.crawls), by the name its cell has:
# the frontier balance (pipeline.core.crawl_states.FrontierBalance), the host schedulers'
# counters and the rows in each state. The rest are counted for the whole job only.
RECORD_COUNTERS: tuple[Counter, ...] = (
    Counter.BATCHES_PUBLISHED, Counter.BATCHES_RECEIVED, Counter.LINK_BATCHES_EMITTED,
    Counter.BATCHES_PUBLISHED_LINKS, Counter.URLS_DECODED,
    Counter.URLS_INVALID, Counter.URLS_OFFERED, Counter.URLS_ACCEPTED, Counter.URLS_REDRIVEN,
    Counter.REQUESTS, Counter.ROBOTS_REQUESTS, Counter.HOSTS_ACTIVATED, Counter.HOSTS_IDLED,
    Counter.LEASES_EXPIRED, Counter.HOSTS_THROTTLED_FOR_DUPLICATES, Counter.URLS_OVERFLOWED,
    Counter.OVERFLOW_URLS_LOST, Counter.URLS_BLOCKED_ADDRESS, Counter.ROBOTS_MESSAGES_EMITTED,
    Counter.HOSTS_PARKED, Counter.URLS_OVER_TIME, Counter.URLS_OUT_OF_SCOPE,
    Counter.HOSTS_PARKED_NOW,
    Counter.URLS_ON_PARKED_HOSTS, Counter.HOSTS_WOKEN,
    Counter.SITEMAP_URLS_LISTED, Counter.SITEMAP_URLS_CUT, Counter.SITEMAPS_FAILED,
    *(Counter(f"rows_{state}") for state in PageState), Counter.BYTES_FETCHED,
)
# Names the record has always had for these: the API and `crawler status` show them.
_RECORD_NAMES: dict[Counter, str] = {
    Counter.URLS_ACCEPTED: "accepted", Counter.BYTES_FETCHED: "bytes",
    **{Counter(f"rows_{state}"): str(state) for state in PageState},
}


def record_name(counter: Counter) -> str:
    """The name of `counter`'s cell in a crawl's record."""
    if counter not in RECORD_COUNTERS:
        raise ValueError(f"{counter} is counted for the whole job, not in a crawl's record")
    return _RECORD_NAMES.get(counter, str(counter))


def rows_in(state: PageState) -> Counter:
    """The counter of terminal rows written in `state`."""
    return Counter(f"rows_{PageState(state)}")


def segment_problem(problem: RecordProblem | str) -> Counter:
    """The counter of records (or, for a whole-file problem, files) a reader refused."""
    problem = RecordProblem(problem)
    if problem.whole_file:
        return Counter(f"segment_files_{problem.value.removesuffix('_file')}")
    return Counter(f"segment_records_{problem}")


def links_rejected(reason: RejectReason | str) -> Counter:
    """The counter of a stored page's links rejected for `reason`."""
    return Counter(f"links_rejected_{RejectReason(reason)}")


def published(kind: BatchKind | HostSignalKind | str) -> Counter:
    """The counter of frontier-topic messages of `kind` that Pub/Sub acknowledged."""
    return Counter(f"batches_published_{kind}")
