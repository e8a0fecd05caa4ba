"""report.html in a real browser: headless Chromium parses every figure and takes a screenshot.

Skips cleanly where no Chromium is installed (the page itself is tested without a browser).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from rundir_builder import make_run

from gate.outputs.html.report import write_report

_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")


def _chromium() -> str | None:
    for candidate in _CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def _flags(profile_dir: Path) -> list[str]:
    # No network of any kind: the page must render from the file alone.
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile_dir}",
    ]


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium installed")
    page = write_report(make_run(tmp_path / "run", profiles=("burst",)))
    url = page.resolve().as_uri()
    screenshot = tmp_path / "report.png"
    shot = subprocess.run(
        [
            browser,
            *_flags(tmp_path / "profile-a"),
            f"--screenshot={screenshot}",
            "--window-size=1400,4000",
            url,
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert shot.returncode == 0, shot.stderr.decode(errors="replace")[-2000:]
    data = screenshot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 50_000  # a blank 1400x4000 page compresses to a few KB
    dom = subprocess.run(
        [browser, *_flags(tmp_path / "profile-b"), "--dump-dom", url],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
    parsed = dom.stdout.decode("utf-8")
    assert parsed.count('data-state="data"') == 9
    assert parsed.count("<svg") == 9
