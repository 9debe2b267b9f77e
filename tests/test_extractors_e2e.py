"""An end-to-end crawl of the synthetic web's fault hosts with the cheapest extractor: lexbor's
links and resiliparse's text leave every invariant the auditor checks intact."""

from __future__ import annotations

import pytest

from tests.test_crawl_e2e import _crawl_and_audit
from testweb.web import WebSpec

pytestmark = pytest.mark.slow


def test_a_crawl_through_every_fault_with_resiliparse_passes_the_audit(tmp_path):
    spec = WebSpec(hosts=20, pages_per_host=20, hang_seconds=5.0, faults=True)
    summary, report, rows, _, _ = _crawl_and_audit(
        tmp_path, spec, min_delay=0.2, max_body_bytes=1024 * 1024, max_calendar_pages=30,
        circuit_failures=3, circuit_seconds=4.0, extractor="resiliparse",
    )
    assert summary.reason == "drained"
    assert report.violations == [], "\n".join(report.violations[:40])
    assert summary.accepted == len(rows) == sum(summary.by_state.values())
    assert sum(r["state"] == "fetched" and bool(r["wet_file"]) for r in rows) > 300
    assert any(r["state"] == "dead_lettered" and r["url"].endswith("/poison.html") for r in rows)
