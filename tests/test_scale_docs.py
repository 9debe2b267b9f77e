"""The scale model sizes from the worker-cost figures as docs/scale.md says, and the generated
sections of docs/scale.md and docs/cost.md are what the generator writes from the committed
inputs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import scale_model
from bench.scale_model import Assumptions, size


def entry(store: float = 10.0, collect: float = 2.0, start: float = 3.0,
          per_url_us: float = 100.0, shuffle: float = 1000.0) -> dict[str, Any]:
    scheduler = {"per_offered_url_us": per_url_us, "per_collect_firing_ms": collect,
                 "per_start_firing_ms": start, "per_repeated_firing_ms": 1.0,
                 "state_bytes": 90_000}
    return {
        "command": "python -m bench.worker_cost --json F", "measured_at": "2026-12-03T11:00Z",
        "pages": {"all": 10}, "body_bytes_per_page": 55_000.0,
        "crawler_ms_per_page": store, "crawler_ms_per_page_state_cache": store + 5,
        "content_ms_per_page": store / 2,
        "scheduler_no_state_cache": scheduler,
        "scheduler_state_cache": {**scheduler, "per_collect_firing_ms": collect / 4,
                                  "per_start_firing_ms": start / 4},
        "shuffle_bytes_per_page": {"Reshuffle": shuffle}, "shuffle_bytes_per_page_total": shuffle,
    }


INPUTS: dict[str, Any] = {
    "command": "python -m bench.scale --write-docs", "measured_at": "2026-12-03T11:00Z",
    "real_pages": {"pages": 181, "links_per_page": 50.0, "link_hosts_per_page": 5.0,
                   "host_batch_bytes_per_page": 4000.0},
    "frontier_us_per_url": 10.0,
    "fetch_client": [{"case": "HTTPS, new connection, gzip", "ms_per_fetch": 2.0,
                      "body_bytes": 55_000},
                     {"case": "HTTP, kept-alive connection, identity", "ms_per_fetch": 1.0,
                      "body_bytes": 55_000}],
}


def sized(figures: dict[str, Any], a: Assumptions, name: str = "x", *,
          cache: bool = False) -> scale_model.Sizing:
    scheduler = figures["scheduler_state_cache" if cache else "scheduler_no_state_cache"]
    return size(name, figures, INPUTS, a, scheduler, state_cache=cache)


def test_cpu_per_page_adds_the_store_stage_scheduler_frontier_fetch_and_rows() -> None:
    a = Assumptions(requests_per_page=1.5, firings_per_request=2.0, rows_per_page=2.0,
                    row_ms=0.5, utilisation=0.5, rate=10_000.0)
    s = sized(entry(), a)
    assert s.store_ms == 10.0
    assert s.firings_ms == pytest.approx(1.5 * 2 * (2.0 + 3.0) / 2)  # 7.5
    assert s.offers_ms == pytest.approx(50 * 100 / 1000)  # 5.0
    assert s.frontier_ms == pytest.approx(50 * 10 / 1000)  # 0.5
    assert s.fetch_ms == pytest.approx(1.5 * 2.0)  # the planning case, not the cheaper one
    assert s.rows_ms == pytest.approx(1.0)
    assert s.total_ms == pytest.approx(27.0)
    assert s.busy_vcpus == pytest.approx(270.0)
    assert s.vcpus == pytest.approx(540.0)
    assert s.workers == math.ceil(540 / a.vcpus_per_worker)
    assert s.shuffle_bytes == pytest.approx(1000 + 4000)
    hours = a.pages / a.rate / 3600
    assert s.vcpu_hours == pytest.approx(s.workers * a.vcpus_per_worker * hours)
    assert s.worker_usd(4.0) == pytest.approx(s.vcpu_hours * (0.069 + 4 * 0.0036))
    assert s.streaming_engine_usd == pytest.approx(5000 * 1e10 / 1e9 * 0.018)


def test_the_state_cache_variant_reads_the_cached_figures() -> None:
    plain = sized(entry(), Assumptions())
    cached = sized(entry(), Assumptions(), cache=True)
    assert cached.store_ms == plain.store_ms + 5
    assert cached.firings_ms == pytest.approx(plain.firings_ms / 4)


@given(store=st.floats(0.1, 200), extra=st.floats(0.01, 50), util=st.floats(0.1, 1.0),
       per_url=st.floats(0, 500))
def test_more_cpu_per_page_never_needs_fewer_vcpus_or_workers(store: float, extra: float,
                                                              util: float,
                                                              per_url: float) -> None:
    a = Assumptions(utilisation=util)
    low = sized(entry(store=store, per_url_us=per_url), a)
    high = sized(entry(store=store + extra, per_url_us=per_url), a)
    assert high.total_ms > low.total_ms
    assert high.vcpus >= low.vcpus >= low.busy_vcpus
    assert high.workers >= low.workers
    assert low.workers * a.vcpus_per_worker >= low.vcpus


@pytest.mark.parametrize("store, answer", [(5.0, "Yes"), (60.0, "No")])
def test_the_verdict_says_plainly_whether_the_default_fits(store: float, answer: str) -> None:
    a = Assumptions()
    rows = [sized(entry(store=store), a, "trafilatura")]
    text = scale_model.verdict(rows, "trafilatura", a)
    assert f"? {answer}.**" in text
    assert f"{rows[0].total_ms:.1f} ms" in text
    assert (rows[0].vcpus <= scale_model.VCPU_LIMIT) == (answer == "Yes")


def test_the_scheduler_figures_are_the_mean_of_every_run() -> None:
    runs = {"extractors": {"a": entry(collect=2.0, per_url_us=100.0),
                           "b": entry(collect=4.0, per_url_us=300.0)}}
    mean = scale_model.scheduler_figures(runs, state_cache=False)
    assert mean["per_collect_firing_ms"] == pytest.approx(3.0)
    assert mean["per_offered_url_us"] == pytest.approx(200.0)
    a, b = scale_model.sizings(runs, INPUTS, Assumptions())
    assert a.firings_ms == b.firings_ms and a.offers_ms == b.offers_ms


def test_a_missing_default_extractor_is_said_not_guessed() -> None:
    a = Assumptions()
    text = scale_model.verdict([sized(entry(), a, "other")], "trafilatura", a)
    assert "Not answered" in text and "trafilatura" in text


def test_an_unknown_fetch_case_is_refused_with_a_remedy() -> None:
    with pytest.raises(SystemExit, match="no fetch client case"):
        sized(entry(), Assumptions(fetch_case="QUIC"))


def test_a_section_is_replaced_between_its_markers_and_nowhere_else() -> None:
    begin = scale_model.BEGIN.format(command=scale_model.DOCS_COMMAND)
    text = f"# Title\n\nbefore\n\n{begin}\nold\n{scale_model.END}\n\nafter\n"
    once = scale_model.replace_section(text, "new body", Path("doc.md"))
    assert "old" not in once and "new body" in once
    assert once.startswith("# Title\n\nbefore\n\n") and once.endswith("\n\nafter\n")
    assert scale_model.replace_section(once, "new body", Path("doc.md")) == once
    with pytest.raises(SystemExit, match="no generated section"):
        scale_model.replace_section("# Title\n", "body", Path("doc.md"))


def test_the_committed_docs_are_what_the_generator_writes_from_the_committed_inputs() -> None:
    docs = scale_model.generated_docs(scale_model.load_json(scale_model.WORKER_COST_JSON),
                                      scale_model.load_json(scale_model.SCALE_INPUTS_JSON))
    for path, text in docs.items():
        assert path.read_text() == text, (
            f"{path} is stale: run `{scale_model.DOCS_COMMAND}` (or "
            f"`{scale_model.REMEASURE_COMMAND}` to measure again)")


def test_the_committed_figures_are_full_runs_of_extractors_the_pipeline_offers() -> None:
    from pipeline.options import EXTRACTORS

    measured = scale_model.load_json(scale_model.WORKER_COST_JSON)["extractors"]
    assert measured and set(measured) <= set(EXTRACTORS)
    for name, figures in measured.items():
        assert figures["quick"] is False, f"{name} was sized from a --quick run"
        # Both are CPU times on a shared machine, measured apart (the pipeline's marginal
        # cost, the content stages standalone): each must exist, their order may swap by noise.
        assert figures["content_ms_per_page"] > 0 and figures["crawler_ms_per_page"] > 0


def test_worker_cost_json_keeps_each_extractors_entry(tmp_path: Path) -> None:
    from bench import worker_cost as wc
    from pipeline.core.records import FetchResult

    result = FetchResult("c", "http://a.test/", 1, "a.test", 1, 0, 1.0, 0.1, 200, (), b"x" * 10)
    scheduler = wc.SchedulerFigures(1e-4, 2e-3, 3e-3, 1e-3, 1000)
    stages = {name: 1e-3 for name in wc.CONTENT_STAGES} | {"rows (Parquet table)": 1e-4}
    in_order = {name: 1.2e-3 for name in wc.CONTENT_STAGES}
    report = wc.Report(
        extractor="trafilatura",
        corpus=wc.Corpus((result,), 1, 0, 0, ()),
        stages=stages,
        pipeline=wc.PipelineFigures(9e-3, 1e-4, 1, 8e-3, 8.5e-3, 2, (7e-3, 9e-3),
                                    (4.9e-3, 5.1e-3), (stages, stages),
                                    page_order_rounds=(in_order, in_order)),
        shuffle={"now": {"content dedup": (1, 300), "rows": (1, 230)},
                 "before": {"Reshuffle": (1, 5000), "content dedup": (1, 300)}},
        shuffle_coder_s=(1e-5, 1e-6), scrapy=None, scheduler=scheduler,
        scheduler_cached=scheduler, extractors=[], links=None, shared_parse=(0.0, 0.0),
        warc=None)
    path = tmp_path / "wc.json"
    wc.write_summary_json(path, report, "python -m bench.worker_cost --json wc.json", False)
    wc.write_summary_json(path, dataclasses.replace(report, extractor="trafilatura-fast"),
                          "python -m bench.worker_cost --extractor trafilatura-fast", False)
    data = json.loads(path.read_text())
    assert list(data["extractors"]) == ["trafilatura", "trafilatura-fast"]
    first = data["extractors"]["trafilatura"]
    assert first["crawler_ms_per_page"] == pytest.approx(8.0)  # the state cache off
    assert first["crawler_ms_per_page_state_cache"] == pytest.approx(9.0)
    assert first["content_ms_per_page"] == pytest.approx(5.0)  # the median of the rounds
    # Each round's share is its own pipeline against its own content pass, and the median of
    # those is the figure (not the share of the two medians).
    assert first["beyond_content_share_samples"] == pytest.approx([2.1 / 7, 3.9 / 9])
    assert first["beyond_content_share"] == pytest.approx((2.1 / 7 + 3.9 / 9) / 2)
    # The same rounds against the content work timed page by page (6 ms a round here).
    assert first["page_order_content_ms_samples"] == pytest.approx([6.0, 6.0])
    assert first["beyond_page_order_share_samples"] == pytest.approx([1 / 7, 3 / 9])
    # Only bytes that cross a shuffle of the store stage as built are summed (one page here).
    assert first["shuffle_bytes_per_page_total"] == pytest.approx(530.0)
    assert first["shuffle_bytes_per_page_by_variant"]["before"]["Reshuffle"] == 5000
    assert first["scheduler_no_state_cache"]["per_offered_url_us"] == pytest.approx(100.0)
    path.write_text(json.dumps({"schema": 0, "extractors": {}}))
    with pytest.raises(SystemExit, match="schema"):
        wc.write_summary_json(path, report, "c", False)


def test_remeasuring_replaces_the_figures_only_when_every_extractor_ran(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from bench import worker_cost
    from bench.scale import remeasure_worker_cost

    target = tmp_path / "worker-cost.json"
    target.write_text('{"schema": 1, "extractors": {"old": {}}}')
    failing = {"trafilatura-fast"}

    def run(command: list[str], **kwargs: object) -> None:
        extractor, out = command[command.index("--extractor") + 1], Path(command[-1])
        if extractor in failing:
            raise subprocess.CalledProcessError(1, command)
        data = json.loads(out.read_text()) if out.exists() else {"schema": 1, "extractors": {}}
        data["extractors"][extractor] = {"command": " ".join(command[1:])}
        out.write_text(json.dumps(data))

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(worker_cost, "EXTRACTORS", ("trafilatura", "trafilatura-fast"))
    with pytest.raises(subprocess.CalledProcessError):
        remeasure_worker_cost(target)
    assert json.loads(target.read_text())["extractors"] == {"old": {}}
    failing.clear()
    remeasure_worker_cost(target)
    measured = json.loads(target.read_text())["extractors"]
    assert list(measured) == ["trafilatura", "trafilatura-fast"]
    assert all(entry["command"].endswith(f"--json {target}") for entry in measured.values())
    assert list(tmp_path.iterdir()) == [target]
