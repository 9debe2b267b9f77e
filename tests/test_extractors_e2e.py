"""An end-to-end crawl of the synthetic web's fault hosts with the cheapest extractor: lexbor's
links and resiliparse's text leave every invariant the auditor checks intact."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.local.runtime import run_local_crawl
from pipeline.options import CrawlOptions
from tests.e2e_web import LIMITS, SPEC, USER_AGENT, audit, page_rows
from testweb.server import read_request_log, serve

pytestmark = pytest.mark.slow


def test_a_crawl_through_every_fault_with_resiliparse_passes_the_audit(emulators, tmp_path):
    budget_per_host = SPEC.pages_per_host + 20
    with serve(replace(SPEC, hosts=6), tmp_path / "requests.tsv") as web:
        opts = CrawlOptions(seeds=tuple(web.seeds), out=str(tmp_path / "out"),
                            user_agent=USER_AGENT, resolve=(web.resolve_arg,), fetch_timeout=2.0,
                            max_pages_per_host=budget_per_host, extractor="resiliparse",
                            progress=False, **LIMITS)
        summary = run_local_crawl(opts)
        rows = page_rows(opts.out, opts.crawl_id)
        report = audit(web, read_request_log(tmp_path / "requests.tsv"), rows,
                       budget_per_host=budget_per_host)
    assert (summary.state, summary.reason) == ("done", "drained")
    assert report.violations == [], "\n".join(report.violations[:40])
    assert summary.accepted == len(rows) == sum(summary.by_state.values())
    assert sum(r["state"] == "fetched" and bool(r["wet_file"]) for r in rows) > 100
    assert any(r["state"] == "dead_lettered" and r["url"].endswith("/poison.html") for r in rows)
