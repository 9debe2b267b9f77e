"""The launcher builds a job Dataflow can run, offline: Beam's Dataflow dry run translates the
whole graph without credentials or network, and every DoFn of the job unpickles where only the
installed package is importable, as on a worker started from the crawler's image. The job is
the crawler's one graph, serving every crawl; a job built with parse_attempts and a page step
of the user's own (installed next to the crawler) translates and unpickles as well."""

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
from types import SimpleNamespace

import apache_beam as beam
import pytest
from apache_beam.internal import pickler
from apache_beam.portability import common_urns, python_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.dataflow.internal import apiclient
from google.cloud import dataflow
from google.protobuf import wrappers_pb2

from pipeline.core.crawl_states import CLOUD_STATE_TTL_S
from pipeline.graph import CrawlWatch, build_crawler
from pipeline.io.pubsub import MESSAGE_ID
from pipeline.io.resources import RESOURCES
from pipeline.main import (
    ONE_SDK_PROCESS_PER_WORKER,
    ROW_SHARDS_PER_WORKER,
    ROW_SHARDS_UNSIZED,
    WATCH_EVERY_S,
    WATCH_QUIET_S,
    LaunchError,
    job_options,
    row_shards,
    run,
    scheduler_config,
)
from pipeline.options import PER_CRAWL, CrawlOptions, option
from pipeline.transforms.crawl_watch import WatchCrawlsFn
from pipeline.transforms.frontier import PublishFn
from pipeline.transforms.pages import ParsePagesFn
from pipeline.transforms.schedule import HostSchedulerFn
from tests.harness_page_steps import MarkPages

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
PARSE_ATTEMPTS = 7


def _dry_run(flags: list[str]) -> apiclient.Job:
    result = run(flags)
    assert result.job is not None, "the dry run returned no job"
    return result.job


@pytest.fixture(scope="module")
def job() -> apiclient.Job:
    """The job the launcher builds."""
    return _dry_run(FLAGS)


@pytest.fixture(scope="module")
def stepped_job() -> apiclient.Job:
    """The one graph as a launcher of the user's own builds it: a page step of theirs and
    more parse attempts."""
    options, crawl = job_options(FLAGS)
    p = beam.Pipeline(options=options)
    build_crawler(
        p, scheduler_config(crawl), out=crawl.out,
        subscription=f"projects/{PROJECT}/subscriptions/{crawl.frontier_subscription}",
        topic=f"projects/{PROJECT}/topics/{crawl.frontier_topic}",
        dead_letter_topic=f"projects/{PROJECT}/topics/{crawl.dead_letter_topic}",
        events_topic=f"projects/{PROJECT}/topics/{crawl.events_topic}",
        parse_attempts=PARSE_ATTEMPTS, page_step=MarkPages("checked"),
        watch=CrawlWatch(every_s=WATCH_EVERY_S, quiet_s=WATCH_QUIET_S))
    result = p.run()
    assert result.job is not None, "the dry run returned no job"
    return result.job


@pytest.fixture(scope="module", params=["job", "stepped_job"])
def any_job(request) -> apiclient.Job:
    return request.getfixturevalue(request.param)


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


def _wake_and_drain_timers(transform: beam_runner_api_pb2.PTransform) -> None:
    """The scheduler's timers in the job Dataflow is sent: its wake in processing time, and
    the drain timer in event time, which only a drain's watermark at infinity fires."""
    pardo = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
    assert len(pardo.state_specs) >= 1
    domains = {name.rsplit("-", 1)[-1]: timer.time_domain
               for name, timer in pardo.timer_family_specs.items()}
    assert domains == {"wake": beam_runner_api_pb2.TimeDomain.PROCESSING_TIME,
                       "drain": beam_runner_api_pb2.TimeDomain.EVENT_TIME}


def test_the_job_schedules_every_crawl_in_host_state_with_a_processing_time_timer(job):
    pardos = _transforms(job, common_urns.primitives.PAR_DO.urn)
    schedulers = [name for name, fn in _dofns(job).items() if isinstance(fn, HostSchedulerFn)]
    assert schedulers == ["ScheduleFetches/HostScheduler/ParDo(HostSchedulerFn)"]
    _wake_and_drain_timers(pardos[schedulers[0]])
    pardo = beam_runner_api_pb2.ParDoPayload.FromString(pardos[schedulers[0]].spec.payload)
    # A host's fields, its crawls' queues, their seen-sets and the tombstones of ended
    # crawls' seen-sets each have a cell of their own (docs/architecture.md).
    assert set(pardo.state_specs) == {"fleet_host", "fleet_host_queues", "fleet_host_seen",
                                      "fleet_host_tombstones"}


def test_a_job_keyed_by_domain_routes_by_domain_and_schedules_in_domain_state_of_its_own():
    """--politeness-key domain reaches the job: the frontier keys by registered domain and
    the scheduler step is DomainSchedulerFn, in cells no host-keyed job has."""
    from pipeline.core.politeness_keys import url_domain_key
    from pipeline.transforms.frontier import DecodeFrontierFn
    from pipeline.transforms.schedule_domain import DomainSchedulerFn

    job = _dry_run([*FLAGS, "--politeness_key", "domain"])
    dofns = _dofns(job)
    schedulers = [name for name, fn in dofns.items() if isinstance(fn, HostSchedulerFn)]
    assert schedulers == ["ScheduleFetches/DomainScheduler/ParDo(DomainSchedulerFn)"]
    assert isinstance(dofns[schedulers[0]], DomainSchedulerFn)
    assert dofns[schedulers[0]]._config.politeness_key == "domain"
    pardos = _transforms(job, common_urns.primitives.PAR_DO.urn)
    _wake_and_drain_timers(pardos[schedulers[0]])
    pardo = beam_runner_api_pb2.ParDoPayload.FromString(pardos[schedulers[0]].spec.payload)
    assert set(pardo.state_specs) == {"domain_hosts", "domain_hosts_queues",
                                      "domain_hosts_seen", "domain_hosts_tombstones"}
    (decode,) = [fn for fn in dofns.values() if isinstance(fn, DecodeFrontierFn)]
    assert decode._key_of is url_domain_key


def test_the_schedulers_read_each_crawls_record_from_the_jobs_bigtable(job):
    (scheduler,) = [fn for fn in _dofns(job).values() if isinstance(fn, HostSchedulerFn)]
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


def test_the_job_ends_its_crawls_from_a_periodic_watch_of_the_records(any_job):
    watches = {name: fn for name, fn in _dofns(any_job).items()
               if isinstance(fn, WatchCrawlsFn)}
    assert list(watches) == ["WatchCrawls/EndCrawlsThatAreOver"]
    (watch,) = watches.values()
    assert (watch._bigtable.project, watch._bigtable.instance) == (PROJECT, "crawler-pages")
    assert watch._quiet_s == WATCH_QUIET_S
    names = {t.unique_name for t in any_job.proto_pipeline.components.transforms.values()}
    # Fed by Beam's PeriodicImpulse, which Dataflow runs as a splittable DoFn; its wakes go
    # to the frontier with the stored pages' links.
    assert "WatchCrawls/EveryFewSeconds" in names
    assert WATCH_EVERY_S < WATCH_QUIET_S


def test_the_store_takes_the_jobs_parse_attempts_and_page_step(job, stepped_job):
    def parsers(built: apiclient.Job) -> list[ParsePagesFn]:
        return [fn for fn in _dofns(built).values() if isinstance(fn, ParsePagesFn)]

    (default,) = parsers(job)
    (stepped,) = parsers(stepped_job)
    assert (default._parse_attempts, stepped._parse_attempts) == (3, PARSE_ATTEMPTS)
    steps = {name: payload for name, payload in _dofn_payloads(stepped_job).items()
             if name.startswith("StorePages/PageStep/")}
    assert list(steps) == ["StorePages/PageStep/MarkRows"]
    # The step's function goes to the workers by name: they import it from the user's module.
    assert b"tests.harness_page_steps" in _pickle_bytes(steps["StorePages/PageStep/MarkRows"])
    assert not any(name.startswith("StorePages/PageStep/") for name in _dofns(job))


def test_the_job_reads_the_fleet_subscription_and_publishes_to_the_fleet_topics(any_job):
    job = any_job
    reads = _transforms(job, common_urns.composites.PUBSUB_READ.urn)
    assert len(reads) == 1
    (read,) = reads.values()
    payload = beam_runner_api_pb2.PubSubReadPayload.FromString(read.spec.payload)
    assert payload.subscription == (
        f"projects/{PROJECT}/subscriptions/{RESOURCES.frontier_subscription}")
    # Dataflow drops a message delivered twice by the id every publish sets (io/pubsub.py).
    assert payload.id_attribute == MESSAGE_ID
    topics = set()
    transforms = {t.unique_name: t for t in job.proto_pipeline.components.transforms.values()}
    # Each publisher reads what a checkpoint committed (a Reshuffle, after the messages were
    # named): a retried publishing bundle sends the same ids, and the readers drop the copies.
    checkpointed = {pc for t in _transforms(job, common_urns.composites.RESHUFFLE.urn).values()
                    for pc in t.outputs.values()}
    for name, payload in _dofn_payloads(job).items():
        fn = pickler.loads(payload)[0]
        if isinstance(fn, PublishFn):
            topics.add(fn._topic)
            assert set(transforms[name].inputs.values()) <= checkpointed, name
    assert topics == {
        f"projects/{PROJECT}/topics/{name}"
        for name in (RESOURCES.frontier_topic, RESOURCES.dead_letter_topic,
                     RESOURCES.events_topic)
    }


# Runs in a fresh interpreter: drops the development install of the package (an editable
# finder pointing at a source tree) and every path of a source tree, shows `pipeline` is then
# not importable, adds the installed copy and unpickles every payload from there; reports the
# parse attempts of every parser it loaded.
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
    report = {"failed": {}, "loaded": [], "parse_attempts": {}}
    for name, payload in payloads.items():
        try:
            data = payload.encode("latin-1")
            # A coder is its class name, "$", then its pickle (base64 holds no "$").
            loaded = (deserialize_coder if b"$" in data else pickler.loads)(data)
        except Exception as exc:
            report["failed"][name] = f"{type(exc).__name__}: {exc}"
            continue
        report["loaded"].append(name)
        fn = loaded[0] if isinstance(loaded, tuple) else loaded
        if hasattr(fn, "_parse_attempts"):
            report["parse_attempts"][name] = fn._parse_attempts
    report["project_modules"] = {
        name: getattr(module, "__file__", None) for name, module in sys.modules.items()
        if name.split(".")[0] in ("pipeline", "testweb", "tests")}
    print(json.dumps(report))
""")


@pytest.fixture(scope="module")
def installed_package(tmp_path_factory) -> Path:
    """The project built as a wheel and installed into a directory of its own, with the
    user's own page step (tests.harness_page_steps) installed next to it, as a launcher of
    the user's own puts its steps on the workers' image."""
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
    (target / "tests").mkdir()
    for name in ("__init__.py", "harness_page_steps.py"):
        shutil.copy(ROOT / "tests" / name, target / "tests" / name)
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
        any_job, installed_package, tmp_path, request):
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
    # The store's parser, with the job's parse attempts.
    stepped = request.node.callspec.params["any_job"] == "stepped_job"
    assert report["parse_attempts"] == {
        "StorePages/ParsePages/Parse/ParDo(ParsePagesFn)": PARSE_ATTEMPTS if stepped else 3}
    # The user's page step came from where it was installed, in the job that has one.
    assert ("tests.harness_page_steps" in modules) is stepped


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


@pytest.mark.parametrize(("drop", "replace", "message"), [
    ("--sdk_container_image", None, "--sdk_container_image is required"),
    ("--out", ["--out", "crawl-out"], "Cloud Storage"),
])
def test_the_launcher_says_which_option_a_dataflow_job_lacks(drop, replace, message):
    i = FLAGS.index(drop)
    flags = FLAGS[:i] + FLAGS[i + 2:] + (replace or [])
    with pytest.raises(LaunchError, match=message):
        job_options(flags)


# A value other than the default for each of a crawl's own limits.
OWN_LIMITS = {"max_pages": "500", "max_pages_per_host": "5", "max_depth": "2",
              "min_delay": "2.5", "user_agent": "fleetbot/1.0", "max_duration": "60",
              "scope": "same-domain", "include": "/docs/", "exclude": "[.]pdf$",
              "sitemaps": None}  # None: a flag, on without a value


def test_every_limit_of_a_crawl_s_own_has_a_value_here():
    assert set(OWN_LIMITS) == set(PER_CRAWL)


@pytest.mark.parametrize("dest", sorted(OWN_LIMITS))
def test_a_crawl_s_own_limit_is_refused_at_job_level_in_one_line(dest, capsys):
    """The job serves every crawl: a limit given to it would apply to none of them."""
    flag = option(dest).beam_flag
    given = [flag, *filter(None, [OWN_LIMITS[dest]])]
    with pytest.raises(LaunchError, match=f"{flag} is a crawl's own limit"):
        job_options([*FLAGS, *given])
    from pipeline.main import main

    assert main([*FLAGS, *given]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"pipeline.main: {flag} is a crawl's own limit")
    assert f"crawler serve {option(dest).flag}" in line  # where it belongs instead


def test_the_job_serves_every_crawl_and_takes_no_crawl_id_or_mode():
    with pytest.raises(LaunchError, match="'c-dataflow' names one crawl"):
        job_options([*FLAGS, "--crawl_id", "c-dataflow"])
    # The one-crawl job is gone with its --mode, which is refused, not dropped; so is any
    # option the crawler does not know, which Beam alone would only log.
    with pytest.raises(LaunchError, match="--mode .*there is no mode"):
        job_options([*FLAGS, "--mode", "crawl"])
    with pytest.raises(LaunchError, match="--max_pagez"):
        job_options([*FLAGS, "--max_pagez", "3"])
    assert not hasattr(job_options(FLAGS)[1], "mode")


def test_the_jobs_own_options_set_what_every_crawl_shares():
    _, crawl = job_options([*FLAGS, "--fetch_timeout", "12", "--budget_block", "32",
                            "--parse_attempts", "5"])
    config = scheduler_config(crawl)
    assert (config.fetch.timeout, config.policy.fetch_timeout) == (12.0, 12.0)
    assert (config.budget_block, crawl.parse_attempts) == (32, 5)
    assert crawl.project == PROJECT and crawl.bigtable_instance == "crawler-pages"


def test_the_launcher_command_reports_a_refused_option_in_one_line(capsys):
    from pipeline.main import main

    assert main([*FLAGS, "--crawl_id", "a/b"]) == 2
    assert main([*FLAGS, "--experiments", "use_multiple_sdk_containers"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("pipeline.main: ") for line in lines)
    assert "--crawl_id 'a/b' names one crawl" in lines[0]
    assert "use_multiple_sdk_containers" in lines[1]


@pytest.mark.parametrize(("flags", "shards"), [
    ([], ROW_SHARDS_UNSIZED),
    (["--max_num_workers", "25"], 25 * ROW_SHARDS_PER_WORKER),
    (["--num_workers", "3"], 3 * ROW_SHARDS_PER_WORKER),
    (["--num_workers", "3", "--max_num_workers", "50"], 50 * ROW_SHARDS_PER_WORKER),
    (["--max_num_workers", "25", "--row_shards", "7"], 7),
], ids=["unsized", "max-workers", "workers", "max-wins", "given"])
def test_the_row_sinks_key_count_grows_with_the_jobs_workers(flags, shards):
    options, crawl = job_options(FLAGS + flags)
    assert row_shards(options, crawl) == shards


def test_the_jobs_row_sinks_spread_rows_over_every_key_of_the_rule():
    """The job's Parquet and BigQuery sinks key rows by the rule above, not a fixed few keys:
    ten thousand rows reach all ROW_SHARDS_UNSIZED keys of a job that names no worker count."""
    job = _dry_run(FLAGS + ["--bigquery_table", f"{PROJECT}:crawl.pages"])
    keyers = {name: fn for name, fn in _dofns(job).items() if "/KeyByShard" in name}
    assert {name.split("/")[0] for name in keyers} == {"WritePagesTable",
                                                        "WritePagesToBigQuery"}
    rows = [SimpleNamespace(url_hash=h * 7919 - 5_000_000) for h in range(10_000)]
    for name, fn in keyers.items():
        keys = {key for row in rows for key, _ in fn.process(row)}
        assert keys == set(range(ROW_SHARDS_UNSIZED)), name
