"""Screenshot a run's report.html with headless Chromium, to check that plots and players render.

    python utils/screenshot_report.py RUN_DIR/report.html OUT.png [--width 1280] [--height 2000]

Needs a Chromium (or Chrome) binary: ``apt-get install -y chromium`` on Debian/Ubuntu. The page
loads nothing from the network, so the screenshot works offline.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> Optional[str]:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(report: Path, out: Path, *, width: int = 1280, height: int = 2000, timeout_s: float = 120.0) -> Path:
    """Render ``report`` to the PNG ``out``; raises RuntimeError with Chromium's output if it fails."""
    binary = find_chromium()
    if binary is None:
        raise RuntimeError(f"no Chromium found (looked for {', '.join(CANDIDATES)}); apt-get install -y chromium")
    report, out = Path(report).resolve(), Path(out).resolve()
    if not report.is_file():
        raise RuntimeError(f"{report}: not found")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [
            binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
            "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
            f"--screenshot={out}", f"--window-size={width},{height}", report.as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0 or not out.is_file():
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        raise RuntimeError(f"chromium failed (exit {proc.returncode}): {' | '.join(tail)}")
    return out


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the report.html to render")
    parser.add_argument("out", type=Path, help="PNG file to write")
    parser.add_argument("--width", type=int, default=1280, help="window width in pixels")
    parser.add_argument("--height", type=int, default=2000, help="window height in pixels")
    args = parser.parse_args(argv)
    try:
        path = screenshot(args.report, args.out, width=args.width, height=args.height)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"screenshot_report: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
