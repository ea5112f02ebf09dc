"""A reloaded page shows the run folder it was showing (kept in its address, ?run=FOLDER), in real headless
Chromium (issue 31, item 10). The app server is this module's own (see conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("selenium", reason="needs selenium: pip install -r requirements.txt")
from selenium.webdriver.common.by import By  # noqa: E402

from tests.webapp.test_browser import open_page, open_tab, text_of, type_into, wait_until  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.slow]


def _run_box(driver) -> str:
    return driver.find_element(By.CSS_SELECTOR, "#run-dir textarea, #run-dir input").get_attribute("value")


def test_a_reload_keeps_the_run_folder_the_page_was_showing(browser, app_server, tmp_path: Path):
    other = tmp_path / "other_run"
    (other / "data").mkdir(parents=True)
    (other / "data" / "report.json").write_text(json.dumps({"kept": 7, "kept_train": 6, "kept_eval": 1}),
                                                encoding="utf-8")
    open_page(browser, app_server.url)
    assert _run_box(browser) == str(app_server.run_dir)
    type_into(browser, "run-dir", str(other))
    wait_until(lambda: "run=" in browser.current_url, 30, "the run folder in the page's address")

    browser.refresh()
    wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "button[role=tab]"), 60, "the tabs")
    wait_until(lambda: _run_box(browser) == str(other), 30, "the run folder back in its box")
    open_tab(browser, "Data")
    wait_until(lambda: "7 clips kept" in text_of(browser, "data-report"), 30, "the other run's dataset report")
    assert app_server.PREFIX in browser.current_url  # behind the proxy path, as a Studio serves it
