"""bench.e2e: the figures taken from the web's request log."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.e2e import calendar_hops, log_figures
from tests.conftest import write_request_log
from testweb.server import read_request_log


def test_a_calendar_hop_is_between_chain_pages_of_one_host(tmp_path: Path) -> None:
    log = write_request_log(tmp_path / "requests.tsv", [
        ("c.test", "/robots.txt", 1_000_000_000),
        ("c.test", "/", 1_500_000_000),  # the home page: not a hop
        ("c.test", "/calendar/2026/01", 2_100_000_000),
        ("d.test", "/calendar/2026/01", 2_200_000_000),  # another chain: not a hop from c
        ("c.test", "/calendar/2026/02", 3_000_000_000),
        ("d.test", "/calendar/2026/02", 2_700_000_000),
        ("c.test", "/calendar/2026/03", 3_700_000_000),
    ])
    assert sorted(calendar_hops(read_request_log(log))) == pytest.approx([0.5, 0.7, 0.9])
    figures = log_figures(log, {}, 0.5)
    assert figures["calendar_hop_s"] == pytest.approx(0.7)
    assert figures["short_gaps"] == 0


def test_a_web_without_calendar_hosts_has_no_hop_figure(tmp_path: Path) -> None:
    log = write_request_log(tmp_path / "requests.tsv", [("a.test", "/robots.txt", 1_000_000_000),
                                                        ("a.test", "/", 1_600_000_000)])
    assert calendar_hops(read_request_log(log)) == []
    assert math.isnan(log_figures(log, {}, 0.5)["calendar_hop_s"])
