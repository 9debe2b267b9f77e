"""The per-input tools start fast: `crawler url normalize` and `crawler robots check` are run
once per input by conformance scripts and must not import Beam to parse their arguments."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


@pytest.mark.parametrize("argv", [
    ["url", "normalize", "http://EXAMPLE.com/a/../b"],
    ["robots", "check", "ROBOTS", "--agent", "bot", "http://a.test/x"],
])
def test_tools_run_without_importing_beam(argv: list[str], tmp_path: Path) -> None:
    robots = tmp_path / "robots.txt"
    robots.write_text("User-agent: *\nDisallow: /x\n")
    argv = [str(robots) if a == "ROBOTS" else a for a in argv]
    script = textwrap.dedent(f"""
        import sys
        from pipeline.cli.main import main
        try:
            main({argv!r})
        except SystemExit as exit:
            code = exit.code
        assert code == 0, code
        heavy = sorted(m for m in sys.modules if m.split(".")[0] == "apache_beam")
        assert not heavy, heavy[:5]
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip()  # the tool's one line


def test_every_command_is_in_the_full_parser() -> None:
    from pipeline.cli.main import COMMANDS, build_parser

    help_text = build_parser().format_help()
    assert all(name in help_text for name in COMMANDS)


@pytest.mark.parametrize(("argv", "spawned"), [
    (["crawl", "http://a.test/", "--max-pages", "many"], True),
    (["demo", "--hosts", "many"], True),
    (["crawl", "--help"], False),
    (["url", "normalize", "http://a.test/"], False),
], ids=["crawl", "demo", "crawl-help", "url"])
def test_local_crawls_spawn_their_emulators_before_parsing(
        argv: list[str], spawned: bool, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`crawler crawl` and `crawler demo` start the emulators booting first, so that the
    Pub/Sub emulator's JVM starts while the command imports Beam to parse its arguments."""
    from pipeline.cli import main as cli
    from pipeline.local import emulators

    calls: list[bool] = []
    monkeypatch.setattr(emulators, "prestart_missing_emulators", lambda: calls.append(True))
    monkeypatch.setattr(sys, "argv", ["crawler", *argv])
    with pytest.raises(SystemExit):  # every argv here stops at parsing (bad value, --help)
        cli.main()
    assert calls == ([True] if spawned else [])
    capsys.readouterr()  # what parsing printed, kept off the test's output
