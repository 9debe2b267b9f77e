"""The package's layers hold: the import-linter contracts in pyproject.toml, a pure core that
imports without Beam, and no import cycle between modules."""

from __future__ import annotations

import pkgutil
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import pytest

import pipeline.core

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = shutil.which("lint-imports", path=str(Path(sys.executable).parent))


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    assert LINT_IMPORTS, "lint-imports is missing: install the test extra (.[test])"
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
    )


def test_every_layer_contract_is_kept() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_forbidden_import_breaks_the_contracts(tmp_path: Path) -> None:
    """The contracts are live: core importing Beam, and io importing the local run, fail."""
    for name in ("pipeline", "testweb"):
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with (tmp_path / "pipeline" / "core" / "bloom.py").open("a") as f:
        f.write("\nimport apache_beam  # noqa\n")
    with (tmp_path / "pipeline" / "io" / "dns.py").open("a") as f:
        f.write("\nimport pipeline.local.progress  # noqa\n")
    result = _lint_imports(tmp_path)
    assert result.returncode != 0
    assert "pipeline.core.bloom -> apache_beam" in result.stdout
    assert "pipeline.io.dns -> pipeline.local.progress" in result.stdout


def _core_modules() -> list[str]:
    return sorted(
        info.name for info in pkgutil.walk_packages(pipeline.core.__path__, "pipeline.core.")
    )


def test_core_imports_in_an_interpreter_without_beam() -> None:
    modules = _core_modules()
    assert len(modules) >= 10
    script = textwrap.dedent(f"""
        import importlib, importlib.abc, sys

        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "apache_beam":
                    raise ImportError(f"{{name}} is not importable here")
                return None

        sys.meta_path.insert(0, Refuse())
        for module in {modules!r}:
            importlib.import_module(module)
        assert not any(m.startswith("apache_beam") for m in sys.modules)
        print("imported", len({modules!r}))
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"imported {len(modules)}" in result.stdout


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start) & modules)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append(
                    (child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules)))
                )
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


@pytest.mark.parametrize("package", ["pipeline", "testweb"])
def test_no_import_cycle(package: str) -> None:
    graph = grimp.build_graph(package, cache_dir=None)
    modules = {m for m in graph.modules if m.split(".")[0] == package}
    assert _cycles(graph, modules) == []
