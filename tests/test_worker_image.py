"""The crawler image is both the Flex Template launcher and every worker's SDK container, and
the workers install nothing at boot: the package and its dependencies are in the image. So
the image sets no setup or requirements file for the launcher to stage, the launcher refuses
one on Dataflow, the worker image is given as Beam's own `sdk_container_image` option (as
Google's Flex Template documentation passes it, not declared in templates/metadata.json), and
the launcher's base image is pinned. Offline: no image is built here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import SetupOptions, WorkerOptions

from pipeline.main import LaunchError, job_options
from tests.test_dataflow import FLAGS, IMAGE
from tests.test_templates import LAUNCHER_BASE, _instructions

ROOT = Path(__file__).resolve().parent.parent


def test_the_launcher_stages_no_setup_or_requirements_file_for_the_workers() -> None:
    env = dict(args.split("=", 1) for keyword, args in _instructions() if keyword == "ENV")
    assert "FLEX_TEMPLATE_PYTHON_PY_FILE" in env
    staged = {"FLEX_TEMPLATE_PYTHON_SETUP_FILE", "FLEX_TEMPLATE_PYTHON_REQUIREMENTS_FILE",
              "FLEX_TEMPLATE_PYTHON_EXTRA_PACKAGES"}
    assert staged & set(env) == set()


def test_the_launcher_base_image_is_pinned_to_a_dated_tag_or_a_digest() -> None:
    args = dict(args.split("=", 1) for keyword, args in _instructions()
                if keyword == "ARG" and "=" in args)
    image = args["LAUNCHER_IMAGE"]
    assert image.startswith(LAUNCHER_BASE)
    reference = image.removeprefix(LAUNCHER_BASE)
    # Google's launcher images are tagged by release date (20260122_RC00); `latest` moves.
    assert re.fullmatch(r":\d{8}_RC\d\d|@sha256:[0-9a-f]{64}", reference), reference


def test_a_dataflow_job_takes_its_worker_image_and_stages_nothing_for_it() -> None:
    options, _ = job_options(FLAGS)
    assert options.view_as(WorkerOptions).sdk_container_image == IMAGE
    setup = options.view_as(SetupOptions)
    assert setup.sdk_location == "container"
    assert setup.setup_file is None and setup.requirements_file is None
    assert not setup.extra_packages


@pytest.mark.parametrize("flag", ["--setup_file", "--requirements_file", "--extra_package"])
def test_the_launcher_refuses_to_stage_a_package_for_the_workers_to_install(
        flag: str, tmp_path) -> None:
    staged = tmp_path / "staged"
    staged.write_text("")
    with pytest.raises(LaunchError, match=re.escape(flag) + r".*sdk_container_image.*"
                                          r"templates/Dockerfile"):
        job_options([*FLAGS, flag, str(staged)])


def test_the_worker_image_is_beams_own_option_not_a_template_parameter() -> None:
    metadata = json.loads((ROOT / "templates" / "metadata.json").read_text())
    names = {parameter["name"] for parameter in metadata["parameters"]}
    assert "sdk_container_image" not in names
    # Dataflow hands it to the launcher as the pipeline option Beam declares.
    assert WorkerOptions(["--sdk_container_image", IMAGE]).sdk_container_image == IMAGE


def test_the_deploy_guide_builds_and_runs_the_template_on_one_image() -> None:
    guide = (ROOT / "docs" / "deploy.md").read_text()
    assert re.search(r"flex-template build .*\\\n\s+--image \"\$IMAGE\"", guide)
    assert 'sdk_container_image="$IMAGE"' in guide
    dataflow_tf = (ROOT / "terraform" / "dataflow.tf").read_text()
    assert re.search(r"sdk_container_image\s+= local\.image", dataflow_tf)
    # ... which the provider sends as the launch environment's field of Dataflow's API.
    import googleapiclient

    discovery = json.loads((Path(googleapiclient.__file__).parent / "discovery_cache" /
                            "documents" / "dataflow.v1b3.json").read_text())
    environment = discovery["schemas"]["FlexTemplateRuntimeEnvironment"]["properties"]
    assert "worker harness" in environment["sdkContainerImage"]["description"]
