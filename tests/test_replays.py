"""Bundles the runner replays leave a crawl's counts, its page budget and its end unchanged
(docs/design.md, "Counters").

A worker lost after a bundle did its work but before the runner committed it is the common
replay on Dataflow: its state changes and outputs are dropped and the bundle runs again. What
the attempt did outside Beam stays done: it claimed pages from the budget, started fetches
and handed counts on. Here every bundle of the frontier's reader, the host scheduler and the
row writer fails once, at its very end (tests/harness_scheduler.py, `replayed_bundles`), on
Beam's DirectRunner, which retries it as Dataflow does; the same crawl runs without failures
beside it, and the two must agree on every count, on the pages the budget granted, and on how
and when the crawl ends.
"""

from __future__ import annotations

import time
from unittest import mock

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream

from pipeline.core.crawl_states import CrawlAction, CrawlLimits, crawl_ending
from pipeline.core.records import FrontierBatch, HostWake
from pipeline.io.crawls import create_crawl, read_crawl
from pipeline.io.pubsub import MESSAGE_ID, Deduplicator
from pipeline.local.emulators import ensure_subscription, ensure_topic
from pipeline.transforms import frontier
from pipeline.transforms.frontier import PublishFn, PublishFrontier
from pipeline.transforms.resources import worker_resources
from tests.conftest import fresh_name
from tests.harness_scheduler import RunResult, ScriptedWeb, linked_chains

HOSTS = ("a.test", "b.test", "c.test")
MAX_PAGES = 10


def _site() -> ScriptedWeb:
    """Three hosts, each a chain of eight pages that also link to a page of the next host."""
    return ScriptedWeb(linked_chains(HOSTS))


def _crawl(scheduler_run, *, replayed: bool) -> tuple[RunResult, str, int]:
    run = scheduler_run(_site(), budget_block=4, rows_to_bigtable=True,
                        replayed_bundles=replayed)
    crawl = run.crawl("replays", max_pages=MAX_PAGES)
    run.offer(0.0, crawl, [f"http://{host}/0" for host in HOSTS])
    result = run.run((20.0, 0.25))
    return result, crawl, run.replayed


def test_replayed_bundles_leave_the_counts_the_budget_and_the_crawl_end_unchanged(
        scheduler_run):
    steady, steady_crawl, none = _crawl(scheduler_run, replayed=False)
    replayed, crawl, failed = _crawl(scheduler_run, replayed=True)
    # Every bundle of the three steps failed once: 28 attempts here (the local runner runs
    # no step on an empty bundle, pipeline.local.direct_runner), over 30 when it did.
    assert none == 0 and failed >= 20, f"{failed} bundle attempts failed"

    # The failed attempts did their work: they started fetches that the retries started again.
    fetched = {end.row.url for end in replayed.left if str(end.row.state) == "fetched"}
    assert len(replayed.pages_requested()) > len(fetched)

    # Every accepted URL left once, and the record counted each once (invariant 3).
    replayed.check_exactly_once()
    steady.check_exactly_once()

    # The budget: exactly MAX_PAGES pages fetched, none lost to a failed attempt's claim.
    assert len(fetched) == MAX_PAGES
    assert {u for u, s in steady.states(steady_crawl).items() if s == "fetched"} == fetched
    assert replayed.states(crawl) == steady.states(steady_crawl)

    # Every count in the record is what the run without failures counted.
    counts, steady_counts = replayed.crawls[crawl].counters, steady.crawls[steady_crawl].counters
    assert {k: v for k, v in counts.items() if v} == {k: v for k, v in steady_counts.items() if v}
    record = replayed.crawls[crawl]
    assert record.counters["requests"] == MAX_PAGES + len(HOSTS)  # pages and robots.txt
    balance = record.balance()
    assert balance.accepted == len(replayed.offered[crawl])
    assert balance.terminal == balance.accepted

    # ... and so the crawl ends as it does without failures: settled, its budget spent.
    for result, crawl_id in ((replayed, crawl), (steady, steady_crawl)):
        record = result.crawls[crawl_id]
        decision = crawl_ending(record.state, record.balance(), quiet_s=10.0,
                                quiet_needed_s=5.0, now=20.0,
                                budget_exhausted=record.budget_exhausted)
        assert decision == (CrawlAction.FINISH, "page budget spent")


# --- a publishing step's retried bundle ----------------------------------------------------------

class _LostAfterPublishing(PublishFn):
    """PublishFn whose bundles each fail once, after Pub/Sub acknowledged every message they
    sent (the worker is lost before the runner commits the bundle): the retry sends them all
    again. Counts what it sent and the attempts that failed."""

    sent = 0
    failed = 0
    _attempts = 0

    def process(self, message):
        type(self).sent += 1
        return super().process(message)

    def finish_bundle(self):
        outputs = list(super().finish_bundle())
        cls = type(self)
        cls._attempts += 1
        if cls._attempts % 2:  # Beam's local runner runs the retry at once: fail, succeed
            cls.failed += 1
            raise RuntimeError("the worker was lost before the bundle committed")
        yield from outputs


def _pull_all(subscription: str, expected: int) -> list:
    from google.cloud import pubsub_v1

    received: list = []
    with pubsub_v1.SubscriberClient() as subscriber:
        deadline = time.monotonic() + 60
        while len(received) < expected and time.monotonic() < deadline:
            answer = subscriber.pull(subscription=subscription, max_messages=100, timeout=10)
            received += [m.message for m in answer.received_messages]
            if answer.received_messages:
                subscriber.acknowledge(subscription=subscription,
                                       ack_ids=[m.ack_id for m in answer.received_messages])
    return received


@pytest.mark.parametrize("checkpoint", [True, False], ids=["dataflow-graph", "local-graph"])
def test_a_replayed_publishing_bundle_sends_the_same_messages_and_the_balance_stays_exact(
        emulators, bigtable_config, bigtable_tables, checkpoint):
    """Every bundle of the frontier's publisher fails once after its messages were sent. The
    copies carry their first ids, so a reader that drops repeats (Dataflow's id_label, the
    local pull's Deduplicator) decodes each message once, and the crawl's record counts on
    the publisher's side exactly what the readers will: its balance neither ends the crawl
    early nor waits for ever. checkpoint: the Dataflow job's graph (a Reshuffle between naming
    and publishing) and the local engine's."""
    crawl = fresh_name("publish")
    create_crawl(bigtable_tables, crawl, seeds=("http://a.test/",),
                 limits=CrawlLimits(max_pages=10), at=time.time())
    topic = ensure_topic("test-project", fresh_name("frontier"))
    subscription = ensure_subscription("test-project", topic, fresh_name("sub"))
    records = [FrontierBatch(crawl, 1, (f"http://a.test/{i}",)) for i in range(5)]
    # Two pages with the same one link make two batches alike: two messages, both counted.
    records += [FrontierBatch(crawl, 2, ("http://a.test/same",))] * 2
    records += [HostWake(crawl, "a.test")]
    stream = (TestStream().add_elements(records[:4]).advance_processing_time(1)
              .add_elements(records[4:]).advance_processing_time(1)
              .advance_watermark_to_infinity())
    _LostAfterPublishing.sent = _LostAfterPublishing.failed = 0
    try:
        with (mock.patch.object(frontier, "PublishFn", _LostAfterPublishing),
              beam.Pipeline(options=PipelineOptions(streaming=True)) as p):
            _ = p | stream | PublishFrontier(topic, counts=bigtable_config,
                                             checkpoint=checkpoint)
    finally:
        worker_resources().close()  # its publisher
    sent, failed = _LostAfterPublishing.sent, _LostAfterPublishing.failed
    assert failed >= 1 and sent > len(records), (sent, failed)

    pulled = _pull_all(subscription, sent)
    assert len(pulled) == sent  # the failed attempts' messages are on the topic too
    repeats = Deduplicator()
    decoded = [m.data for m in pulled if repeats.first(m.attributes[MESSAGE_ID])]
    assert sorted(decoded) == sorted(record.to_bytes() for record in records)
    assert read_crawl(bigtable_tables, crawl).balance().published == len(records)
