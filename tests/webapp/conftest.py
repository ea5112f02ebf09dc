"""Browser fixtures: headless Chromium from Debian's packages through selenium, and the app as a real server.

Without ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (or selenium) the browser tests skip and
name the install command; nothing is downloaded.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.webapp.path_proxy import PathProxy

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL = "apt-get install -y chromium chromium-driver"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def browser():
    if not (Path(CHROMIUM).is_file() and Path(CHROMEDRIVER).is_file()):
        pytest.skip(f"needs Chromium and its driver: {INSTALL}")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("needs selenium: pip install -r requirements.txt")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1700",
                "--autoplay-policy=no-user-gesture-required"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def demo_config(tmp_path_factory, tiny_base_dir) -> Path:
    """configs/demo.yaml made short: the tiny model, one evaluation sentence, evaluated at the start and the end."""
    raw = yaml.safe_load((REPO_ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8"))
    raw["base_model"] = {"source": str(tiny_base_dir)}
    # no short clips cut by alignment (seconds of the first run's prepare): no page shows them
    raw["dataset"].update(path=str(REPO_ROOT / raw["dataset"]["path"]), num_workers=1, short_clips="off")
    raw["tokenizer"]["extra_text_files"] = [str(REPO_ROOT / f) for f in raw["tokenizer"]["extra_text_files"]]
    raw["asr"]["model"] = str(REPO_ROOT / raw["asr"]["model"])
    # Steps take 0.05 s on idle cores and seconds on busy ones: the run is made long enough to outlast the
    # app's restart on any machine, and the test shortens it (as a person would) before resuming it.
    raw["training"].update(max_steps=100_000, batch_size=2, warmup_steps=2, log_every=2, num_workers=0)
    raw["checkpoint"].update(every_steps=100)  # saved at the stop and at the end
    raw["evaluation"].update(every_steps=0, eval_at_start=True, sentences=["ሰላም ለዓለም።"], max_new_tokens=20,
                              mcd_clips=0, quality=False)  # listening: the demo run's tests (tests/test_end_to_end.py)
    path = tmp_path_factory.mktemp("webapp_config") / "demo_short.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    return path


class AppServer:
    """``python -m xtts_ft ui`` in its own process group, so a test can kill the app and everything it owns.

    It is reached the way a Lightning Studio's port view reaches it: through a proxy that serves it
    under a path (``--root-path``), so every browser test also shows the app works behind one.
    """

    PREFIX = "/proxy/7860"

    def __init__(self, run_dir: Path, config: Path, log: Path):
        self.run_dir, self.config, self.log = run_dir, config, log
        self.port = _free_port()
        self.proc = None
        self.proxy = PathProxy(self.PREFIX, self.port)

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def direct_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), GRADIO_ANALYTICS_ENABLED="False")
        with open(self.log, "a", encoding="utf-8") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "xtts_ft", "ui", "--run", str(self.run_dir), "--port", str(self.port),
                 "--config", str(self.config), "--root-path", self.PREFIX],
                cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        end = time.monotonic() + 120
        while time.monotonic() < end:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(self.direct_url, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise AssertionError("the app did not answer in 120 s:\n" + self.log.read_text()[-3000:])

    def kill_group(self) -> None:
        """What closing the terminal does: the app's whole process group ends."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(20)


@pytest.fixture(scope="module")
def app_server(tmp_path_factory, demo_config):
    root = tmp_path_factory.mktemp("webapp")
    server = AppServer(root / "run", demo_config, root / "app.log")
    server.start()
    yield server
    server.kill_group()
    server.proxy.close()
    record = root / "run" / "app_process.json"
    if record.is_file():  # a failed test may leave the training process going: end it (it is ours)
        import json

        import psutil

        pid = json.loads(record.read_text())["pid"]
        try:
            proc = psutil.Process(pid)
            if "headless_train.py" in " ".join(proc.cmdline()):
                proc.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    """Where the tab screenshots go: XTTS_FT_SCREENSHOTS (e.g. docs/webapp to refresh docs/webapp.md's) or a scratch folder."""
    folder = os.environ.get("XTTS_FT_SCREENSHOTS")
    out = Path(folder) if folder else tmp_path_factory.mktemp("shots")
    out.mkdir(parents=True, exist_ok=True)
    return out

