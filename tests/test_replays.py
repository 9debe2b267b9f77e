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

from pipeline.core.crawl_states import CrawlAction, crawl_ending
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
    assert none == 0 and failed >= 30, f"{failed} bundle attempts failed"

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
