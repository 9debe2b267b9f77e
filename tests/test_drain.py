"""A drain and a relaunch on the same stores lose no accepted URL and fetch none twice
(docs/design.md, invariant 7).

A Dataflow drain stops reading the frontier, finishes what the job holds in flight, and then
advances the watermark to infinity, which fires every event-time timer; a drained job's state
is gone. The scheduler's drain timer (HostSchedulerFn.on_drain) writes each key's state out
then (pipeline.io.drained_state) with a wake on the frontier per crawl with work there, and
the first event of the key in the relaunched job reads it back.

The end-to-end test runs the scheduler on Beam's DirectRunner from a TestStream
(tests/harness_scheduler.py), whose end is exactly that: the source is finished and the
watermark goes to +infinity, firing the drain timers. A second run on the same Bigtable
instance, under the same drain scope (the frontier subscription a relaunched job reads
again), gets what the first left on the frontier (its wakes and the links found after its
last tick) and must finish the crawl: every URL offered in either run ends exactly once, no
page is requested twice, and the crawl's record counts every URL once.

The other tests drive the DoFn directly (tests/harness_hosts.py) for what a drain leaves in
each cell and timer, the domain scheduler's drain, and the end of a key's state when it has
nothing left to remember.
"""

from __future__ import annotations

from collections import Counter

from pipeline.core.crawl_states import CrawlAction, CrawlLimits
from pipeline.core.records import FetchResult, HostWake
from pipeline.io.crawls import apply_action, create_crawl, read_crawl
from pipeline.io.drained_state import DrainedState
from pipeline.transforms.tags import Tag
from tests.conftest import fresh_name
from tests.harness_hosts import TEXT, Hosts, tagged
from tests.harness_scheduler import ScriptedWeb, linked_chains

HOSTS = ("a.test", "b.test", "c.test")


def _site() -> ScriptedWeb:
    """Three hosts, each a chain of eight pages that also link to a page of the next host:
    at a 1 s delay, a few seconds reach only the start of each chain."""
    return ScriptedWeb(linked_chains(HOSTS))


def test_a_drain_mid_crawl_then_a_relaunch_ends_every_url_once_and_fetches_none_twice(
        scheduler_run, bigtable_config, bigtable_tables):
    web = _site()
    first = scheduler_run(web)
    crawl = first.crawl("drained", max_pages=1000)
    first.offer(0.0, crawl, [f"http://{host}/0" for host in HOSTS])
    drained = first.run((4.0, 0.25))

    # The drain came mid-crawl: every host's state went out, and a host with URLs waiting
    # (the others' next links may still be on the frontier) left a wake for the next job.
    woken = {wake.host for wake in drained.relaunch}
    assert woken and woken <= set(HOSTS)
    assert all(wake.crawl_id == crawl for wake in drained.relaunch)
    scope = first.scheduler.drain_scope
    tables = DrainedState(bigtable_tables.frontier, scope, "host")
    assert set(tables.keys()) == set(HOSTS)
    fetched_first = {r.url for r in drained.pages_requested()}
    assert 3 <= len(fetched_first) < 24

    # The relaunch: the same stores and scope, with what the drained job left on the frontier.
    second = scheduler_run(web, drain_scope=scope)
    second.adopt(crawl)
    second.publish(0.0, [wake.to_bytes() for wake in drained.relaunch] + drained.undelivered)
    relaunched = second.run((45.0, 0.25))

    requested = Counter(r.url for r in relaunched.requests if not r.is_robots)
    assert not [url for url, n in requested.items() if n > 1], relaunched.timeline()
    # Every chain page of every host was fetched, across the two jobs.
    chains = {f"http://{host}/{n}" for host in HOSTS for n in range(8)}
    assert chains <= set(requested)
    # Each offered URL (in either job) ended exactly once, in either job.
    ends = Counter(end.key for end in drained.left + relaunched.left)
    assert not [key for key, n in ends.items() if n > 1]
    offered = {(crawl, url) for result in (drained, relaunched)
               for url in result.offered.get(crawl, [])}
    assert set(ends) == offered
    record = read_crawl(bigtable_tables, crawl)
    # Counted once each: the relaunch counts nothing the drained job had counted.
    assert record.accepted == len(offered)
    # The relaunched job finished the work: its own drain had nothing to hand on.
    assert relaunched.relaunch == []
    relaunched.check_polite(1.0)


def test_a_drain_collects_the_fetch_in_flight_writes_the_state_out_and_empties_the_key(
        bigtable_config, bigtable_tables):
    crawl = fresh_name("drain")
    create_crawl(bigtable_tables, crawl, seeds=(), limits=CrawlLimits(max_pages=100), at=0.0)
    hosts = Hosts(bigtable_config)
    try:
        hosts.offer(crawl, "http://a.test/1", "http://a.test/2", "http://a.test/3")
        assert hosts.drains["a.test"].at is not None  # armed with the key's state
        hosts.fire("a.test", 0.0)  # robots.txt first
        hosts.pool.finish(0, status=404, body=b"", headers=TEXT)
        hosts.fire("a.test", 0.1)
        hosts.fire("a.test", 1.2)  # /1 starts
        url, _, _ = hosts.pool.submitted[-1]
        assert url == "http://a.test/1"
        hosts.pool.finish(len(hosts.pool.submitted) - 1)
        before = hosts.state("a.test").crawls[crawl]
        queued = [entry.url for entry in before.backlog.queue]

        out = hosts.drain("a.test")

        # The fetch in flight was collected and went on down the graph.
        assert [r.url for r in out if isinstance(r, FetchResult)] == ["http://a.test/1"]
        assert tagged(out, Tag.RELAUNCH) == [HostWake(crawl, "a.test")]
        assert all(cell.value is None for cell in hosts.cells["a.test"].values())
        assert hosts.timers["a.test"].at is None
        drained = DrainedState(bigtable_tables.frontier, hosts.config.drain_scope, "host")
        assert drained.keys() == ["a.test"]
    finally:
        hosts.close()

    # The relaunched job: its first event of the key reads the state back before anything.
    again = Hosts(bigtable_config, drain_scope=hosts.config.drain_scope)
    try:
        again.pool.clock[0] = 5.0
        again.publish(HostWake(crawl, "a.test"))
        state = again.state("a.test").crawls[crawl]
        assert [entry.url for entry in state.backlog.queue] == queued == ["http://a.test/2",
                                                                 "http://a.test/3"]
        assert state.seen == before.seen
        again.fire("a.test", 5.0)
        assert [url for url, _, _ in again.pool.submitted] == ["http://a.test/2"]
    finally:
        again.close()


def test_a_key_with_nothing_left_to_remember_leaves_no_state_timer_or_snapshot(
        bigtable_config, bigtable_tables):
    crawl = fresh_name("forget")
    create_crawl(bigtable_tables, crawl, seeds=(), limits=CrawlLimits(max_pages=100), at=0.0)
    hosts = Hosts(bigtable_config, tombstone_s=60.0)
    drained = DrainedState(bigtable_tables.frontier, hosts.config.drain_scope, "host")
    try:
        hosts.offer(crawl, "http://a.test/1")
        # A snapshot a drained job left for this key, which it would have restored from.
        drained.write("a.test", {"stale": True}, {})
        hosts.fire("a.test", 0.0)
        hosts.pool.finish(0, status=404, body=b"", headers=TEXT)
        hosts.fire("a.test", 0.1)
        hosts.fire("a.test", 1.2)
        hosts.pool.finish(1)
        hosts.fire("a.test", 1.3)
        apply_action(bigtable_tables, crawl, CrawlAction.FINISH, at=2.0)
        from pipeline.transforms.schedule import crawl_records
        crawl_records().clear()
        hosts.fire("a.test", 3.0)  # the crawl ended: evicted, a tombstone for 60 s
        assert hosts.cells["a.test"]["host_state"].value is not None
        assert hosts.timers["a.test"].at is not None
        hosts.fire("a.test", 70.0)  # the tombstone's horizon passed
        assert all(cell.value is None for cell in hosts.cells["a.test"].values())
        assert hosts.timers["a.test"].at is None and hosts.drains["a.test"].at is None
        assert drained.read("a.test") is None
    finally:
        hosts.close()
