"""What the crawler's wheel, and so its Dataflow image, ships: `pipeline` and nothing of the
development checkout. The synthetic web (testweb/) is a distribution of its own: a checkout
installs it for `crawler demo`, `crawler testweb`, the tests and the benchmarks; a worker
that parses hostile pages carries no test server. Without it, those two commands say what to
install instead of failing on an import.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pipeline.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent
# Everything at the top of the checkout that holds Python: all of it is next to pyproject.toml
# when the wheel is built, so the wheel's package list is what keeps it out.
CHECKOUT = ("pipeline", "testweb", "tests", "bench", "examples")


def _build_wheel(source: Path, out: Path) -> Path:
    # No build isolation: the backend (setuptools, wheel) is installed, and nothing is fetched.
    result = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
         str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> list[str]:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for name in CHECKOUT:
        shutil.copytree(ROOT / name, source / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    with zipfile.ZipFile(_build_wheel(source, work / "dist")) as wheel:
        return wheel.namelist()


def _top_level(files: list[str]) -> set[str]:
    return {name.split("/", 1)[0] for name in files}


def test_the_crawler_wheel_holds_the_pipeline_package_and_nothing_of_the_checkout(
        wheel_files) -> None:
    top = _top_level(wheel_files)
    (info,) = [name for name in top if name.endswith(".dist-info")]
    assert top == {"pipeline", info}, sorted(top)
    assert {"pipeline/__init__.py", "pipeline/main.py", "pipeline/graph.py",
            "pipeline/core/urls.py", "pipeline/io/fetch.py"} <= set(wheel_files)
    # Its package data too: the status page and the offline API docs.
    assert any(name.startswith("pipeline/service/static/") for name in wheel_files)
    for absent in ("testweb", "tests", "bench", "examples"):
        assert not [name for name in wheel_files if name.startswith(absent + "/")], absent


def test_every_module_of_the_pipeline_package_is_in_the_wheel(wheel_files) -> None:
    modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "pipeline").rglob("*.py")
               if "__pycache__" not in path.parts}
    assert modules - set(wheel_files) == set()


def test_the_synthetic_web_is_a_distribution_of_its_own_with_only_its_package(
        tmp_path) -> None:
    source = tmp_path / "testweb"
    shutil.copytree(ROOT / "testweb", source, ignore=shutil.ignore_patterns("__pycache__",
                                                                            "*.egg-info"))
    with zipfile.ZipFile(_build_wheel(source, tmp_path / "dist")) as wheel:
        files = wheel.namelist()
    (info,) = [name for name in _top_level(files) if name.endswith(".dist-info")]
    assert info.startswith("beam_crawler_testweb-")
    # Every module, those of its subpackages too (the web itself is one: testweb/web/).
    modules = {f"testweb/{path.relative_to(ROOT / 'testweb').as_posix()}"
               for path in (ROOT / "testweb").rglob("*.py")
               if not {"__pycache__", "build"} & set(path.relative_to(ROOT / "testweb").parts)}
    assert "testweb/web/synthetic.py" in modules
    assert {name for name in files if not name.startswith(info)} == modules


def test_the_crawler_image_copies_no_synthetic_web() -> None:
    dockerfile = (ROOT / "templates" / "Dockerfile").read_text()
    copies = re.findall(r"^COPY (?!--from)(.+)$", dockerfile, flags=re.MULTILINE)
    sources = {source for line in copies for source in line.split()[:-1]}
    assert "pipeline" in sources
    assert not sources & {"testweb", "tests", "bench", "examples", "."}, sources
    admitted = [line[1:].strip().rstrip("/") for line in
                (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")]
    assert "testweb" not in admitted
    # The image installs the package from its pyproject.toml, whose wheel is the one above.
    assert re.search(r"^RUN pip install .*--no-deps .*/template$", dockerfile, flags=re.MULTILINE)


@pytest.fixture
def no_synthetic_web(monkeypatch):
    """An interpreter where `import testweb` fails, as in the crawler's image."""
    for name in list(sys.modules):
        if name == "testweb" or name.startswith("testweb."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "testweb", None)


@pytest.mark.parametrize("argv", [["demo"], ["testweb", "--hosts", "3"], ["-v", "demo"]],
                         ids=["demo", "testweb", "verbose-demo"])
def test_without_the_synthetic_web_its_commands_say_what_to_install(
        no_synthetic_web, capsys, argv) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    command = next(arg for arg in argv if not arg.startswith("-"))
    assert err.startswith(f"crawler {command}: the synthetic web")
    assert "pip install -e ./testweb" in err


def test_without_the_synthetic_web_every_other_command_still_parses(
        no_synthetic_web, capsys) -> None:
    parser = cli.build_parser()
    parser.parse_args(["url", "normalize", "http://example.com/"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    # argparse wraps the help: compare words.
    assert "pip install -e ./testweb" in " ".join(capsys.readouterr().out.split())


def test_with_the_synthetic_web_installed_the_commands_find_it() -> None:
    # The development install (make, or pip install -e ./testweb) has it.
    assert cli.has_synthetic_web()
