"""bench.hops: the hop figures come from the web's request log, on the chain host alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.hops import CHAIN_CASE, chain_host, hop_gaps
from tests.conftest import write_request_log
from testweb.web import SyntheticWeb, WebSpec
from testweb.web.spec import HostRole


def test_gaps_are_between_page_requests_of_the_chain_host(tmp_path: Path) -> None:
    log = write_request_log(tmp_path / "requests.tsv", [
        ("c.test", "/robots.txt", 1_000_000_000),
        ("c.test", "/", 1_100_000_000),
        ("o.test", "/", 1_200_000_000),  # another host: not a hop
        ("c.test", "/calendar/2026/01", 1_700_000_000),
        ("c.test", "/calendar/2026/02", 2_500_000_000),
    ])
    gaps, first_ns = hop_gaps(log, "c.test")
    assert gaps == pytest.approx([0.6, 0.8])
    assert first_ns == 1_000_000_000  # start-up ends at the first request, robots.txt included


def test_the_chain_host_is_the_webs_calendar_host() -> None:
    web = SyntheticWeb(WebSpec(hosts=CHAIN_CASE.hosts, pages_per_host=CHAIN_CASE.pages_per_host),
                       port=8080)
    host = chain_host()
    assert web.profile(host).role is HostRole.CALENDAR
