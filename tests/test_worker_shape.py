"""One worker shape everywhere: the launcher gives a Dataflow job the machine type and harness
threads docs/architecture.md ("One worker shape") chooses when the launch names none, keeps
what a launch names, and Terraform's default machine and both sizing docs say the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import DebugOptions, WorkerOptions

from pipeline.main import (
    ONE_SDK_PROCESS_PER_WORKER,
    WORKER_HARNESS_THREADS,
    WORKER_MACHINE_TYPE,
    job_options,
)

ROOT = Path(__file__).resolve().parents[1]
FLAGS = [
    "--runner", "DataflowRunner", "--project", "fake-crawl-project", "--region", "europe-west1",
    "--temp_location", "gs://some-bucket/tmp",
    "--sdk_container_image", "europe-west1-docker.pkg.dev/fake-crawl-project/crawler/c:t",
    "--out", "gs://some-bucket/crawl", "--bigtable_instance", "crawler-pages",
]


def test_a_dataflow_job_gets_the_chosen_machine_and_harness_threads() -> None:
    options, _ = job_options(FLAGS)
    assert options.view_as(WorkerOptions).machine_type == WORKER_MACHINE_TYPE
    debug = options.view_as(DebugOptions)
    assert debug.number_of_worker_harness_threads == WORKER_HARNESS_THREADS
    assert debug.lookup_experiment(ONE_SDK_PROCESS_PER_WORKER)


def test_a_machine_and_threads_the_launch_names_are_kept() -> None:
    options, _ = job_options([*FLAGS, "--machine_type", "n2-standard-8",
                              "--number_of_worker_harness_threads", "4"])
    assert options.view_as(WorkerOptions).machine_type == "n2-standard-8"
    assert options.view_as(DebugOptions).number_of_worker_harness_threads == 4


def test_a_local_runner_gets_no_worker_shape() -> None:
    options, _ = job_options(["--out", "/tmp/crawl-out"])
    assert options.view_as(WorkerOptions).machine_type is None
    assert options.view_as(DebugOptions).number_of_worker_harness_threads is None


def test_terraform_defaults_to_the_launchers_machine_type() -> None:
    variables = (ROOT / "terraform" / "variables.tf").read_text()
    block = re.search(r'variable "machine_type" \{(.*?)\n\}', variables, re.DOTALL)
    assert block is not None, "terraform/variables.tf has no machine_type variable"
    default = re.search(r'default\s*=\s*"([^"]+)"', block.group(1))
    assert default is not None and default.group(1) == WORKER_MACHINE_TYPE


@pytest.mark.parametrize("doc", ["architecture.md", "scale.md"])
def test_the_sizing_docs_name_the_same_worker_shape(doc: str) -> None:
    text = (ROOT / "docs" / doc).read_text()
    assert f"`{WORKER_MACHINE_TYPE}`" in text
    assert f"`--number_of_worker_harness_threads {WORKER_HARNESS_THREADS}`" in text
    # No other whole machine type is given as the worker's (n2-*-N stands for a family).
    others = set(re.findall(r"\bn2-(?:standard|highcpu|highmem)-\d+\b", text))
    assert others <= {WORKER_MACHINE_TYPE, "n2-highcpu-2"}, others
