"""Debian's Chromium driven by Playwright (its bundled driver only: browsers are never
downloaded): where Chromium is missing and the tests run as root with apt-get, it is
installed with apt; otherwise the tests that need it are skipped with the reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: Headless, and nothing that reaches out to the network or needs a GPU or a sandbox
#: (the tests run as root in containers).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
APT_TIMEOUT_S = 900


def chromium_missing() -> str | None:
    """Why no Chromium can be used here (None: ``/usr/bin/chromium`` is there, maybe just
    installed by apt-get)."""
    if CHROMIUM.exists():
        return None
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return f"{CHROMIUM} is missing (install Debian's chromium package as root)"
    try:
        result = subprocess.run(
            [apt, "install", "-y", "--no-install-recommends", "chromium", "chromium-driver"],
            capture_output=True, text=True, timeout=APT_TIMEOUT_S,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    except subprocess.TimeoutExpired:
        return f"apt-get install chromium took over {APT_TIMEOUT_S} s"
    if result.returncode != 0 or not CHROMIUM.exists():
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"apt-get install chromium failed: {tail[0]}"
    return None


def launch(playwright: Any, user_data_dir: Path) -> Any:
    """A headless Chromium context with a fresh profile in ``user_data_dir``."""
    return playwright.chromium.launch_persistent_context(
        str(user_data_dir), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
        viewport={"width": 1440, "height": 900})


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A Playwright browser context of Debian's Chromium (skips the module's tests when
    there is none and none can be installed)."""
    reason = chromium_missing()
    if reason is not None:
        pytest.skip(reason)
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="the playwright package is missing: make install")
    with sync_api.sync_playwright() as playwright, \
            tempfile.TemporaryDirectory(prefix="weir-chromium-") as profile:
        context = launch(playwright, Path(profile))
        try:
            yield context
        finally:
            context.close()
