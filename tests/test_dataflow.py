"""The launcher builds a job Dataflow can run, offline: Beam's Dataflow dry run translates the
whole graph without credentials or network, and every DoFn of the job unpickles where only the
installed package is importable, as on a worker started from the crawler's image. The job is
the fleet by default; `--mode crawl` is the one-crawl job."""

from __future__ import annotations

import base64
import bz2
import json
import shutil
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.internal import pickler
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import common_urns, python_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.dataflow.internal import apiclient
from google.cloud import dataflow
from google.protobuf import wrappers_pb2
from pipeline.transforms.fleet import FleetSchedulerFn

from pipeline.core.budget import BlockPageBudget, LocalPageBudget
from pipeline.core.crawl_states import CLOUD_STATE_TTL_S
from pipeline.graph import build_crawl
from pipeline.io.resources import RESOURCES
from pipeline.main import (
    ONE_SDK_PROCESS_PER_WORKER,
    WATCH_EVERY_S,
    WATCH_QUIET_S,
    LaunchError,
    job_options,
    run,
)
from pipeline.options import CrawlOptions
from pipeline.transforms.budget import BigtablePageClaims
from pipeline.transforms.crawl_watch import WatchCrawlsFn
from pipeline.transforms.frontier import PublishFn

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "fake-crawl-project"
IMAGE = "europe-west1-docker.pkg.dev/fake-crawl-project/crawler/crawler:test"
# A bucket name that is valid: with an invalid one Beam tries to create a default bucket over
# the network.
FLAGS = [
    "--runner", "DataflowRunner", "--dry_run=True", "--project", PROJECT,
    "--region", "europe-west1", "--temp_location", "gs://some-bucket/tmp",
    "--sdk_container_image", IMAGE, "--out", "gs://some-bucket/crawl",
    "--bigtable_instance", "crawler-pages",
]
CRAWL_FLAGS = [*FLAGS, "--mode", "crawl", "--crawl_id", "c-dataflow"]


def _dry_run(flags: list[str]) -> apiclient.Job:
    result = run(flags)
    assert result.job is not None, "the dry run returned no job"
    return result.job


@pytest.fixture(scope="module")
def job() -> apiclient.Job:
    """The default job: the fleet."""
    return _dry_run(FLAGS)


@pytest.fixture(scope="module")
def crawl_job() -> apiclient.Job:
    return _dry_run(CRAWL_FLAGS)


@pytest.fixture(scope="module", params=["fleet", "crawl"])
def any_job(request) -> apiclient.Job:
    return request.getfixturevalue("job" if request.param == "fleet" else "crawl_job")


def _transforms(job: apiclient.Job, urn: str) -> dict[str, beam_runner_api_pb2.PTransform]:
    return {t.unique_name: t for t in job.proto_pipeline.components.transforms.values()
            if t.spec.urn == urn}


def _dofn_payloads(job: apiclient.Job) -> dict[str, bytes]:
    payloads = {}
    for name, transform in _transforms(job, common_urns.primitives.PAR_DO.urn).items():
        pardo = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
        assert pardo.do_fn.urn == python_urns.PICKLED_DOFN_INFO, name
        payloads[name] = pardo.do_fn.payload
    return payloads


def _dofns(job: apiclient.Job) -> dict[str, beam.DoFn]:
    return {name: pickler.loads(payload)[0] for name, payload in _dofn_payloads(job).items()}


def test_the_launcher_builds_a_streaming_job(any_job):
    assert any_job.proto.type == dataflow.JobType.JOB_TYPE_STREAMING


def test_the_job_runs_one_sdk_process_per_worker_on_streaming_engine_and_the_crawler_image(
        any_job):
    job = any_job
    # What Dataflow receives with the job (the dry run stops before building it).
    environment = apiclient.Environment(
        packages=[], options=job.options,
        environment_version=apiclient._FNAPI_ENVIRONMENT_MAJOR_VERSION,
        proto_pipeline_staged_url="gs://some-bucket/tmp/pipeline.pb",
        proto_pipeline=job.proto_pipeline,
    ).proto
    experiments = set(environment.experiments)
    assert ONE_SDK_PROCESS_PER_WORKER in experiments
    assert "use_multiple_sdk_containers" not in experiments
    assert "enable_streaming_engine" in experiments
    images = [image.container_image for pool in environment.worker_pools
              for image in pool.sdk_harness_container_images]
    assert images == [IMAGE]
    docker = [env for env in job.proto_pipeline.components.environments.values()
              if env.urn == common_urns.environments.DOCKER.urn]
    assert [beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image
            for env in docker] == [IMAGE]


def _only_timer_is_processing_time(transform: beam_runner_api_pb2.PTransform) -> None:
    pardo = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
    assert len(pardo.state_specs) >= 1
    timers = dict(pardo.timer_family_specs)
    assert len(timers) == 1
    (timer,) = timers.values()
    assert timer.time_domain == beam_runner_api_pb2.TimeDomain.PROCESSING_TIME


def test_the_fleet_job_schedules_in_host_state_with_a_processing_time_timer(job):
    pardos = _transforms(job, common_urns.primitives.PAR_DO.urn)
    schedulers = [name for name, fn in _dofns(job).items() if isinstance(fn, FleetSchedulerFn)]
    assert len(schedulers) == 1
    _only_timer_is_processing_time(pardos[schedulers[0]])
    # The fleet job is not the one-crawl job: no one-crawl scheduler in it.
    assert not any(name.endswith("ParDo(HostSchedulerFn)") for name in pardos)


def test_the_fleet_schedulers_read_each_crawls_record_from_the_jobs_bigtable(job):
    (scheduler,) = [fn for fn in _dofns(job).values() if isinstance(fn, FleetSchedulerFn)]
    config = scheduler._config
    assert (config.bigtable.project, config.bigtable.instance) == (PROJECT, "crawler-pages")
    assert config.bigtable.crawls_table == RESOURCES.crawls_table
    # The bound the cloud API waits out after a pause or cancel (pipeline.service.cloud).
    assert config.state_ttl_s == CLOUD_STATE_TTL_S
    # No page limit of the job's own: each crawl brings its budget in its record.
    assert config.policy.max_pages_per_host is None and config.policy.max_depth is None
    assert config.resolve == ()
    # Each crawl's pages are claimed job-wide from its record, in blocks.
    assert config.budget_block == CrawlOptions(seeds=()).budget_block
    budget = scheduler._budget("c-x", 100)
    assert isinstance(budget, BlockPageBudget) and budget.block == config.budget_block
    assert budget._advance == BigtablePageClaims(config.bigtable, "c-x")


def test_a_fleet_counting_budgets_per_process_is_refused_on_dataflow():
    import dataclasses

    from pipeline.graph import build_fleet
    from pipeline.main import fleet_config

    options, crawl = job_options(FLAGS)
    local = dataclasses.replace(fleet_config(crawl), budget_block=None)
    with pytest.raises(ValueError, match="LocalPageBudget.*DataflowRunner"):
        build_fleet(beam.Pipeline(options=options), local, out=crawl.out,
                    subscription=f"projects/{PROJECT}/subscriptions/s",
                    topic=f"projects/{PROJECT}/topics/t",
                    dead_letter_topic=f"projects/{PROJECT}/topics/d")


def test_the_fleet_job_ends_its_crawls_from_a_periodic_watch_of_the_records(job):
    watches = {name: fn for name, fn in _dofns(job).items() if isinstance(fn, WatchCrawlsFn)}
    assert list(watches) == ["WatchCrawls/EndCrawlsThatAreOver"]
    (watch,) = watches.values()
    assert (watch._bigtable.project, watch._bigtable.instance) == (PROJECT, "crawler-pages")
    assert watch._quiet_s == WATCH_QUIET_S
    names = {t.unique_name for t in job.proto_pipeline.components.transforms.values()}
    # Fed by Beam's PeriodicImpulse, which Dataflow runs as a splittable DoFn.
    assert "WatchCrawls/EveryFewSeconds" in names
    assert WATCH_EVERY_S < WATCH_QUIET_S


def test_the_host_scheduler_is_stateful_with_a_processing_time_timer(crawl_job):
    job = crawl_job
    scheduler = [t for name, t in _transforms(job, common_urns.primitives.PAR_DO.urn).items()
                 if name.endswith("ParDo(HostSchedulerFn)")]
    assert len(scheduler) == 1
    pardo = beam_runner_api_pb2.ParDoPayload.FromString(scheduler[0].spec.payload)
    # The fields cell keeps its name from when it held the whole state; the queue's data and
    # the seen-set have cells of their own (docs/architecture.md).
    assert set(pardo.state_specs) == {"host", "host_queue", "host_seen"}
    timers = dict(pardo.timer_family_specs)
    assert len(timers) == 1
    (timer,) = timers.values()
    assert timer.time_domain == beam_runner_api_pb2.TimeDomain.PROCESSING_TIME


def test_the_job_reads_the_fleet_subscription_and_publishes_to_the_fleet_topics(any_job):
    job = any_job
    reads = _transforms(job, common_urns.composites.PUBSUB_READ.urn)
    assert len(reads) == 1
    (read,) = reads.values()
    payload = beam_runner_api_pb2.PubSubReadPayload.FromString(read.spec.payload)
    assert payload.subscription == (
        f"projects/{PROJECT}/subscriptions/{RESOURCES.frontier_subscription}")
    topics = set()
    for payload in _dofn_payloads(job).values():
        fn = pickler.loads(payload)[0]
        if isinstance(fn, PublishFn):
            topics.add(fn._topic)
    assert topics == {
        f"projects/{PROJECT}/topics/{name}"
        for name in (RESOURCES.frontier_topic, RESOURCES.dead_letter_topic,
                     RESOURCES.events_topic)
    }


# Runs in a fresh interpreter: drops the development install of the package (an editable
# finder pointing at a source tree) and every path of a source tree, shows `pipeline` is then
# not importable, adds the installed copy and unpickles every payload from there.
_UNPICKLE = textwrap.dedent("""
    import importlib.util, json, sys
    target, payloads_file, *source_trees = sys.argv[1:]
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    # A virtualenv may live inside the checkout (.venv): its site-packages stays.
    sys.path[:] = [p for p in sys.path if p and not any(
        (p == s or p.startswith(s + "/")) and not p.startswith(sys.prefix) for s in source_trees)]
    assert importlib.util.find_spec("pipeline") is None, "a source tree is still importable"
    sys.path.insert(0, target)
    from apache_beam.coders.coders import deserialize_coder
    from apache_beam.internal import pickler
    payloads = json.load(open(payloads_file))
    report = {"failed": {}, "loaded": []}
    for name, payload in payloads.items():
        try:
            data = payload.encode("latin-1")
            # A coder is its class name, "$", then its pickle (base64 holds no "$").
            (deserialize_coder if b"$" in data else pickler.loads)(data)
        except Exception as exc:
            report["failed"][name] = f"{type(exc).__name__}: {exc}"
            continue
        report["loaded"].append(name)
    report["project_modules"] = {
        name: getattr(module, "__file__", None) for name, module in sys.modules.items()
        if name.split(".")[0] in ("pipeline", "testweb")}
    print(json.dumps(report))
""")


@pytest.fixture(scope="module")
def installed_package(tmp_path_factory) -> Path:
    """The project built as a wheel and installed into a directory of its own."""
    work = tmp_path_factory.mktemp("package")
    source = work / "source"
    for name in ("pipeline", "testweb"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
         str(work / "dist"), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = (work / "dist").glob("*.whl")
    target = work / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    return target


def _unpickled_in_isolation(payloads: dict[str, bytes], installed_package: Path,
                            tmp_path: Path) -> dict:
    """_UNPICKLE's report on `payloads`, loaded in a fresh interpreter from the installed
    package alone (the source trees are kept off its path)."""
    payloads_file = tmp_path / "payloads.json"
    payloads_file.write_text(json.dumps({k: v.decode("latin-1") for k, v in payloads.items()}))
    source_trees = sorted({str(ROOT), str(Path(pipeline_source()).parent)})
    result = subprocess.run(
        [sys.executable, "-I", "-c", _UNPICKLE, str(installed_package), str(payloads_file),
         *source_trees],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_dofn_of_the_job_unpickles_from_the_installed_package_alone(
        any_job, installed_package, tmp_path):
    payloads = _dofn_payloads(any_job)
    # The DoFns that need the package: the crawl's own, and Beam's wrapping its functions.
    assert len([name for name, payload in payloads.items()
                if b"pipeline." in _pickle_bytes(payload)]) >= 14
    report = _unpickled_in_isolation(payloads, installed_package, tmp_path)
    assert report["failed"] == {}
    assert sorted(report["loaded"]) == sorted(payloads)
    modules = report["project_modules"]
    assert "pipeline.transforms.schedule" in modules
    outside = {name: path for name, path in modules.items()
               if path is not None and not path.startswith(str(installed_package))}
    assert outside == {}


def _coder_payloads(job: apiclient.Job) -> dict[str, bytes]:
    """The job's pickled coders, as serialized for the workers."""
    payloads = {}
    for coder_id, coder in job.proto_pipeline.components.coders.items():
        if coder.spec.urn == python_urns.PICKLED_CODER:
            payloads[coder_id] = wrappers_pb2.BytesValue.FromString(coder.spec.payload).value
    return payloads


def test_the_record_coders_of_the_job_unpickle_from_the_installed_package_alone(
        any_job, installed_package, tmp_path):
    payloads = _coder_payloads(any_job)
    # The store stage's shuffles carry StoredPage and the rows sinks PageRow.
    assert {"StoredPageCoder", "PageRowCoder"} <= {
        name.split("_")[2] for name in payloads}, sorted(payloads)
    report = _unpickled_in_isolation(payloads, installed_package, tmp_path)
    assert report["failed"] == {}
    assert sorted(report["loaded"]) == sorted(payloads)
    assert "pipeline.transforms.coders" in report["project_modules"]


def _pickle_bytes(payload: bytes) -> bytes:
    """The pickle inside a payload (base64 of a zlib or bz2 stream, as Beam's pickler
    writes it)."""
    compressed = base64.b64decode(payload)
    try:
        return zlib.decompress(compressed)
    except zlib.error:
        return bz2.decompress(compressed)


def pipeline_source() -> str:
    import pipeline

    return str(Path(pipeline.__file__).resolve().parent)


def test_a_process_local_budget_on_a_runner_with_many_processes_is_refused():
    options, crawl = job_options(CRAWL_FLAGS)
    p = beam.Pipeline(options=options)
    with pytest.raises(ValueError, match="LocalPageBudget.*DataflowRunner"):
        build_crawl(
            p, crawl, subscription=f"projects/{PROJECT}/subscriptions/s",
            topic=f"projects/{PROJECT}/topics/t", dead_letter_topic=f"projects/{PROJECT}/topics/d",
            budget=LocalPageBudget(crawl.crawl_id, crawl.max_pages),
        )


def test_a_process_local_budget_on_a_direct_runner_with_several_processes_is_refused():
    p = beam.Pipeline(options=PipelineOptions(
        ["--direct_running_mode=multi_processing"], runner="DirectRunner", streaming=True))
    crawl = CrawlOptions(seeds=(), crawl_id="c-local")
    with pytest.raises(ValueError, match="LocalPageBudget"):
        build_crawl(p, crawl, subscription="projects/local-crawler/subscriptions/s",
                    topic="projects/local-crawler/topics/t",
                    dead_letter_topic="projects/local-crawler/topics/d",
                    budget=LocalPageBudget(crawl.crawl_id, crawl.max_pages))


def test_a_process_local_budget_is_accepted_on_the_direct_runner():
    p = beam.Pipeline(options=PipelineOptions([], runner="DirectRunner", streaming=True))
    crawl = CrawlOptions(seeds=(), crawl_id="c-local")
    build_crawl(p, crawl, subscription="projects/local-crawler/subscriptions/s",
                topic="projects/local-crawler/topics/t",
                dead_letter_topic="projects/local-crawler/topics/d",
                budget=LocalPageBudget(crawl.crawl_id, crawl.max_pages))
    names = {t.full_label for t in p.transforms_stack[0].parts}
    assert "ScheduleFetches" in names


@pytest.mark.parametrize("flags", [FLAGS, CRAWL_FLAGS], ids=["fleet", "crawl"])
@pytest.mark.parametrize(("drop", "replace", "message"), [
    ("--sdk_container_image", None, "--sdk_container_image is required"),
    ("--out", ["--out", "crawl-out"], "Cloud Storage"),
])
def test_the_launcher_says_which_option_a_dataflow_job_lacks(flags, drop, replace, message):
    i = flags.index(drop)
    flags = flags[:i] + flags[i + 2:] + (replace or [])
    with pytest.raises(LaunchError, match=message):
        job_options(flags)


def test_a_one_crawl_job_needs_its_crawl_id_and_the_fleet_takes_none():
    with pytest.raises(LaunchError, match="--crawl_id is required with --mode crawl"):
        job_options([*FLAGS, "--mode", "crawl"])
    with pytest.raises(LaunchError, match="the fleet serves every crawl"):
        job_options([*FLAGS, "--crawl_id", "c-dataflow"])
    with pytest.raises(SystemExit):  # argparse names the choices
        job_options([*FLAGS, "--mode", "batch"])
    assert job_options(FLAGS)[1].mode == "fleet"
    assert job_options(CRAWL_FLAGS)[1].mode == "crawl"


def test_the_crawl_options_reach_the_job():
    _, crawl = job_options([*CRAWL_FLAGS, "--max_pages", "500", "--min-delay", "2.5",
                            "--user-agent", "fleetbot/1.0"])
    assert (crawl.max_pages, crawl.min_delay, crawl.user_agent) == (500, 2.5, "fleetbot/1.0")
    assert crawl.project == PROJECT and crawl.bigtable_instance == "crawler-pages"


def test_the_fleet_jobs_options_are_the_defaults_a_crawl_record_overrides():
    from pipeline.main import fleet_config

    _, crawl = job_options([*FLAGS, "--min-delay", "2.5", "--user-agent", "fleetbot/1.0",
                            "--fetch_timeout", "12"])
    config = fleet_config(crawl)
    assert (config.policy.min_delay, config.policy.user_agent) == (2.5, "fleetbot/1.0")
    assert config.fetch.timeout == 12.0


def test_the_launcher_command_reports_a_refused_option_in_one_line(capsys):
    from pipeline.main import main

    assert main([*FLAGS, "--mode", "crawl", "--crawl_id", "a/b"]) == 2
    assert main([*FLAGS, "--experiments", "use_multiple_sdk_containers"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("pipeline.main: ") for line in lines)
    assert "--crawl-id 'a/b'" in lines[0]
    assert "use_multiple_sdk_containers" in lines[1]
