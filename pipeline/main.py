"""The launcher: `python -m pipeline.main` submits the crawler's job to any Beam runner.

It takes Beam's usual flags (`--runner`, `--project`, `--region`, `--temp_location`, ...) and
the crawler's options (pipeline.options), builds the job on the fleet's cloud resources
(topics, subscription and tables named by options, defaults in pipeline.io.resources), calls
run() and returns. It never waits for the job: in a Flex Template the launch ends once the job
is submitted, and the job runs on.

The job is the crawler's one graph (pipeline.graph.build_crawler): one long-running pipeline
serving every crawl the control API (pipeline.service) starts, each crawl's limits and state
read from its record in Bigtable, and a watch in the same job that ends crawls once they are
over (pipeline.transforms.crawl_watch). A crawl's own limits (its page, host, depth and time
budgets) are the crawl's, set when it starts: the launcher refuses them, in one line, rather
than let them apply to no crawl.

On Dataflow it also asks for what the crawler needs there (docs/architecture.md, "Running on
Dataflow"): a streaming job on Streaming Engine; one SDK process per worker, so the process
that started a host's fetch is the one whose timer collects it, on two-vCPU workers
(WORKER_MACHINE_TYPE) unless the launch names a machine; workers on the image that has
this package installed (`--sdk_container_image`), with nothing staged for the workers to
install over it (no `--setup_file`, `--requirements_file` or `--extra_package`); output on
Cloud Storage.

It does not create topics, tables or subscriptions (terraform/ does), start crawls (the
control API does), or patch any runner. On a local runner the job lives only as long as this
process: a crawl on one machine is `crawler crawl`, the crawler's API on one machine `crawler
serve`.
"""

from __future__ import annotations

import logging
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DebugOptions,
    GoogleCloudOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)
from apache_beam.runners.runner import PipelineResult

from pipeline.core.crawl_states import CLOUD_STATE_TTL_S
from pipeline.graph import CrawlWatch, build_crawler, scheduler_config
from pipeline.io.storage import is_gcs
from pipeline.options import PER_CRAWL, CrawlOptions, CrawlPipelineOptions, option

log = logging.getLogger(__name__)

# Dataflow starts one SDK process per vCPU by default. A host's fetch runs on a thread pool of
# the process whose timer started it, and the result waits there for the host's next timer
# firing; with one process per worker, every firing of a key on that worker finds it.
ONE_SDK_PROCESS_PER_WORKER = "no_use_multiple_sdk_containers"
# The worker shape that goes with one SDK process (docs/architecture.md, "One worker shape"):
# the process runs Python on one core at a time, so a worker has two vCPUs, the second for
# the native work beside it (parsing, gzip, TLS, gRPC) and Dataflow's own processes; n2-standard
# memory (8 GB) holds a process's fetches in flight at their size limit (128 x 10 MiB) with
# room to spare, where n2-highcpu-2's 2 GB would not. Used when the launch names no machine.
WORKER_MACHINE_TYPE = "n2-standard-2"
# Bundles one SDK process runs at once: enough that bundles waiting on state reads and Bigtable
# keep its one core busy, few enough that they do not queue on the GIL. Used when not given.
WORKER_HARNESS_THREADS = 12
# The crawl watch: how often it reads the crawl records, and how long a crawl's counters must
# stand still, settled, before it ends. The frontier's balance already says whether work is
# between stages; the stillness covers counts not yet written (a process writes them every
# half second) and a bundle retried after a worker restarted, with room to spare, at the
# cost of a minute before a finished crawl reads `done`.
WATCH_EVERY_S = 5.0
WATCH_QUIET_S = 60.0


class LaunchError(ValueError):
    """The options cannot make a job that does what the crawl promises; says what to add."""


def is_dataflow(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, str) else type(runner).__name__ if runner else ""
    return name.lower().removesuffix("runner") == "dataflow"


def job_options(argv: list[str] | None) -> tuple[PipelineOptions, CrawlOptions]:
    """Beam's options for the job, completed with what the crawl needs, and the crawl's own.

    Raises LaunchError naming the missing or wrong option.
    """
    options = PipelineOptions(argv)
    unknown = sorted(set(options.get_all_options(retain_unknown_options=True))
                     - set(options.get_all_options()))
    if unknown:
        # Beam would only log and drop them: a misspelt knob must not launch a job without it.
        hint = (" (the job is the crawler's one graph, serving every crawl the control API "
                "starts: there is no mode)") if "mode" in unknown else ""
        raise LaunchError(f"unknown option(s) {', '.join('--' + u for u in unknown)}{hint}; "
                          "`python -m pipeline.options --docs` lists the crawler's")
    view = options.view_as(CrawlPipelineOptions)
    if view.crawl_id is not None:
        raise LaunchError(
            f"--crawl_id {view.crawl_id!r} names one crawl, but the job serves every crawl "
            "the control API starts (POST /crawls), each with its own id; drop it")
    for dest in PER_CRAWL:
        opt = option(dest)
        given = getattr(view, opt.beam_name)
        if given is not None and given != opt.default:
            raise LaunchError(
                f"{opt.beam_flag} is a crawl's own limit, set when the crawl starts (POST "
                f"/crawls, or the API's default: `crawler serve {opt.flag}`), not the job's")
    crawl = CrawlOptions.from_pipeline_options(options)
    if crawl.resume or crawl.redrive or crawl.resolve:
        raise LaunchError("--resume, --redrive and --resolve belong to a crawl on one machine "
                          "(`crawler crawl`), not to a job")
    options.view_as(StandardOptions).streaming = True
    # Every DoFn comes from the installed package; nothing of __main__ is needed.
    options.view_as(SetupOptions).save_main_session = False
    if is_dataflow(options):
        _complete_for_dataflow(options, crawl)
    return options, crawl


def _complete_for_dataflow(options: PipelineOptions, crawl: CrawlOptions) -> None:
    if not options.view_as(GoogleCloudOptions).project:
        raise LaunchError("--project is required on Dataflow: the job's project, which also "
                          "holds the crawl's topics and Bigtable instance")
    if not is_gcs(crawl.out):
        raise LaunchError(f"--out {crawl.out!r}: on Dataflow the segments and the pages table "
                          "go to Cloud Storage; give --out gs://BUCKET/PREFIX")
    worker = options.view_as(WorkerOptions)
    if not worker.sdk_container_image:
        raise LaunchError(
            "--sdk_container_image is required on Dataflow: the stock worker image does not "
            "have this package, and every DoFn of the crawl would fail to unpickle "
            "(ModuleNotFoundError: pipeline); give the image built from templates/Dockerfile")
    setup = options.view_as(SetupOptions)
    staged = [flag for flag, given in (("--setup_file", setup.setup_file),
                                       ("--requirements_file", setup.requirements_file),
                                       ("--extra_package", setup.extra_packages)) if given]
    if staged:
        # A Flex Template image that sets FLEX_TEMPLATE_PYTHON_SETUP_FILE passes --setup_file.
        raise LaunchError(
            f"{', '.join(staged)}: the workers run the crawler's image "
            "(--sdk_container_image), which holds the package and every dependency; a staged "
            "copy would be installed over it at every worker start. Build what the job needs "
            "into the image (templates/Dockerfile) instead")
    if setup.sdk_location == "default":
        setup.sdk_location = "container"  # the image has the SDK; do not stage another
    options.view_as(GoogleCloudOptions).enable_streaming_engine = True
    debug = options.view_as(DebugOptions)
    if debug.lookup_experiment("use_multiple_sdk_containers"):
        raise LaunchError("the experiment use_multiple_sdk_containers would let a host's timer "
                          "fire in another process than its fetch; drop it")
    debug.add_experiment(ONE_SDK_PROCESS_PER_WORKER)
    if not worker.machine_type:
        worker.machine_type = WORKER_MACHINE_TYPE
    if not debug.number_of_worker_harness_threads:
        debug.number_of_worker_harness_threads = WORKER_HARNESS_THREADS


# Keys per worker the row sinks batch on (pipeline.transforms.table, .bigquery): a few per
# worker, so each worker has writers to run and a key never carries more than its share.
ROW_SHARDS_PER_WORKER = 4
# Keys when the job names no worker count (as for 100 workers).
ROW_SHARDS_UNSIZED = 400


def row_shards(options: PipelineOptions, crawl: CrawlOptions) -> int:
    """The row sinks' key count: --row_shards, else ROW_SHARDS_PER_WORKER per worker of the
    job's --max_num_workers (else --num_workers), else ROW_SHARDS_UNSIZED."""
    if crawl.row_shards:
        return crawl.row_shards
    worker = options.view_as(WorkerOptions)
    workers = worker.max_num_workers or worker.num_workers
    return ROW_SHARDS_PER_WORKER * workers if workers else ROW_SHARDS_UNSIZED


def build_job(p: beam.Pipeline, crawl: CrawlOptions) -> None:
    """The crawler on its cloud resources, with the watch that ends its crawls."""
    project = crawl.project
    build_crawler(
        # Each process reads a crawl's record at most every CLOUD_STATE_TTL_S.
        p, scheduler_config(crawl, state_ttl_s=CLOUD_STATE_TTL_S), out=crawl.out,
        subscription=f"projects/{project}/subscriptions/{crawl.frontier_subscription}",
        topic=f"projects/{project}/topics/{crawl.frontier_topic}",
        dead_letter_topic=f"projects/{project}/topics/{crawl.dead_letter_topic}",
        duplicates=crawl.duplicate_policy(), extractor=crawl.extractor,
        parse_attempts=crawl.parse_attempts,
        events_topic=f"projects/{project}/topics/{crawl.events_topic}",
        bigquery_table=crawl.bigquery_table,
        watch=CrawlWatch(every_s=WATCH_EVERY_S, quiet_s=WATCH_QUIET_S),
        row_shards=row_shards(p.options, crawl),
    )


def run(argv: list[str] | None = None) -> PipelineResult:
    """Build the job from argv and submit it; returns at once with the runner's result."""
    options, crawl = job_options(argv)
    p = beam.Pipeline(options=options)
    build_job(p, crawl)
    return p.run()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                                                   "%(message)s")
    try:
        result = run(argv)
    except ValueError as exc:  # LaunchError, or an option CrawlOptions refuses
        print(f"pipeline.main: {exc}", file=sys.stderr)
        return 2
    job_id = getattr(result, "job_id", None)
    log.info("submitted%s; state %s", f" job {job_id()}" if callable(job_id) else "",
             result.state)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
