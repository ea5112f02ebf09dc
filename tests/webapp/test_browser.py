"""The web app driven in real headless Chromium, on the demo (tiny model, a short run).

One app server and one training run are shared by the tests below, in file order: bad inputs,
then Start / watch / restart the app / Stop / Resume, then Listen, then Speak, then a reload that
keeps another run folder (last: it points the page elsewhere). Each tab's screenshot is saved
(``XTTS_FT_SCREENSHOTS=docs/webapp`` refreshes docs/webapp.md's).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("selenium", reason="needs selenium: pip install -r requirements.txt")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

from tests.webapp.conftest import AppServer  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.slow]  # the app as a real server, a training run started from the browser


def wait_until(check, timeout: float, what: str):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - a page still rendering: try again until the deadline
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def open_page(driver, url: str) -> None:
    driver.get(url)
    wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, "button[role=tab]"), 60, "the tabs")


def open_tab(driver, name: str) -> None:
    tab = next(t for t in driver.find_elements(By.CSS_SELECTOR, "button[role=tab]") if t.text.startswith(name))
    tab.click()
    time.sleep(0.5)


def text_of(driver, elem_id: str) -> str:
    return driver.find_element(By.ID, elem_id).text


def message(driver, elem_id: str) -> str:
    """An error message once it is there ("" until then; Gradio's progress overlay is not a message)."""
    text = text_of(driver, elem_id)
    return text if "error:" in text else ""


def type_into(driver, elem_id: str, value: str) -> None:
    box = driver.find_element(By.CSS_SELECTOR, f"#{elem_id} textarea, #{elem_id} input")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    box.send_keys(value)
    box.send_keys(Keys.TAB)  # blur: Gradio has the value


def click(driver, elem_id: str) -> None:
    driver.find_element(By.ID, elem_id).click()


def loss_points(driver) -> int:
    return len(driver.find_elements(By.CSS_SELECTOR, "#train-curves g#curve-loss use"))


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def audio_loads(driver, element) -> list:
    """[readyState, duration] once the element has loaded its audio (or why not)."""
    return driver.execute_async_script(
        "const a = arguments[0], done = arguments[1];"
        "if (a.readyState >= 1 && a.duration > 0) { done([a.readyState, a.duration]); return; }"
        "a.addEventListener('loadedmetadata', () => done([a.readyState, a.duration]));"
        "a.addEventListener('error', () => done(['error', a.error && a.error.code, a.src]));"
        "a.load(); setTimeout(() => done(['timeout', a.readyState, a.src]), 15000);", element)


def test_bad_inputs_show_the_loaders_one_line_message(browser, app_server, tmp_path):
    open_page(browser, app_server.url)
    open_tab(browser, "Train")
    type_into(browser, "field-training-lr", "-0.001")
    click(browser, "train-check")
    msg = wait_until(lambda: message(browser, "train-message"), 30, "the check message")
    assert "training.lr: -0.001 is not a plausible learning rate" in msg and "Traceback" not in msg
    type_into(browser, "field-training-lr", "0.001")
    missing = tmp_path / "no_such_dataset"
    type_into(browser, "field-dataset-path", str(missing))
    click(browser, "train-start")  # Start checks first: nothing is launched
    wait_until(lambda: f"dataset.path: folder '{missing}' does not exist" in text_of(browser, "train-message"), 30,
               "the dataset message")
    assert not (app_server.run_dir / "app_process.json").exists()
    open_tab(browser, "Data")
    type_into(browser, "data-path", str(missing))
    type_into(browser, "data-out", str(tmp_path / "prepared"))
    click(browser, "data-prepare")
    msg = wait_until(lambda: message(browser, "data-message"), 30, "the data message")
    assert f"dataset.path: folder '{missing}' does not exist" in msg and "Traceback" not in msg


def test_train_watch_restart_stop_and_resume(browser, app_server, screenshots):
    run_dir = app_server.run_dir
    open_page(browser, app_server.url)  # a fresh page: the form holds the config's values again
    open_tab(browser, "Train")
    click(browser, "train-start")
    wait_until(lambda: "Started" in text_of(browser, "train-message"), 30, "the start message")
    pid = json.loads((run_dir / "app_process.json").read_text())["pid"]
    wait_until(lambda: loss_points(browser) >= 1, 240, "the first point of the loss curve")
    first = loss_points(browser)

    # the app goes away with its whole process group, and comes back: the same run is still going
    app_server.kill_group()
    app_server.start()
    open_page(browser, app_server.url)
    open_tab(browser, "Train")
    status = wait_until(lambda: "running" in text_of(browser, "train-status") and text_of(browser, "train-status"),
                        30, "the run shown as running after the restart")
    assert f"pid {pid}" in status
    gained = wait_until(lambda: loss_points(browser) > first and loss_points(browser), 120, "the curve to gain points")
    assert "step" in text_of(browser, "train-progress")
    browser.save_screenshot(str(screenshots / "train.png"))

    click(browser, "train-stop")
    wait_until(lambda: "stopped" in text_of(browser, "train-status"), 120, "the run to stop")
    stop = [e for e in events(run_dir) if e.get("event") == "stop"][-1]
    assert stop["signal"] == "SIGTERM" and stop["step"] >= gained
    saved = Path(stop["checkpoint"])
    assert saved.name == f"step_{stop['step']:06d}" and (saved / "training_state.pt").is_file()
    assert "resume command" in text_of(browser, "train-status")

    # the run was started long; end it a few steps after the stop (the resume command reads the config file)
    end = stop["step"] + 4
    config = yaml.safe_load(app_server.config.read_text(encoding="utf-8"))
    config["training"]["max_steps"] = end
    app_server.config.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    click(browser, "train-resume")
    wait_until(lambda: "Resumed" in text_of(browser, "train-message"), 30, "the resume message")
    wait_until(lambda: "finished" in text_of(browser, "train-status"), 400, "the resumed run to finish")
    resumed = [e for e in events(run_dir) if e.get("event") == "resume"]
    assert resumed and resumed[-1]["step"] == stop["step"], events(run_dir)
    assert (run_dir / "checkpoints" / f"step_{end:06d}" / "training_state.pt").is_file()
    wait_until(lambda: f"step {end}/{end}" in text_of(browser, "train-progress"), 30, "the last step shown")


def test_listen_plays_a_sample_marks_the_best_and_exports(browser, app_server, screenshots):
    open_page(browser, app_server.url)
    open_tab(browser, "Listen")
    click(browser, "listen-refresh")
    players = wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "#listen-samples audio"), 60, "the samples")
    state = audio_loads(browser, players[0])
    assert state[0] in (1, 2, 3, 4) and state[1] > 0, state
    assert "heard" in text_of(browser, "listen-samples") and "CER" in text_of(browser, "listen-samples")
    side = wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "#listen-a audio"), 30, "checkpoint A's player")
    assert audio_loads(browser, side[0])[1] > 0
    last = max(int(p.name.split("_")[1]) for p in (app_server.run_dir / "checkpoints").glob("step_*"))
    # the first evaluation (before training) beside the last one: same sentence and voice
    def sides():
        a, b = (browser.find_element(By.CSS_SELECTOR, f"#listen-{x} .side") for x in "ab")
        return (a.get_attribute("data-step"), b.get_attribute("data-step"),
                bool(a.find_elements(By.CSS_SELECTOR, ".best")), bool(b.find_elements(By.CSS_SELECTOR, ".best")))

    wait_until(lambda: sides() == ("0", str(last), False, True), 30, "step 0 beside the best, last step")
    assert f"step {last}" in text_of(browser, "listen-best")
    browser.save_screenshot(str(screenshots / "listen.png"))
    click(browser, "listen-export")  # the best checkpoint is chosen: the project's own export writes exports/<step>
    wait_until(lambda: "Exported" in text_of(browser, "listen-export-message"), 120, "the export")
    assert (app_server.run_dir / "exports" / f"step_{last:06d}" / "model.pth").is_file()


def test_speak_refuses_a_wrong_script_and_gives_audio(browser, app_server, screenshots):
    open_page(browser, app_server.url)
    open_tab(browser, "Data")
    wait_until(lambda: "66 clips kept" in text_of(browser, "data-report"), 30, "the run's dataset report")
    click(browser, "data-random")
    wait_until(lambda: browser.find_element(By.CSS_SELECTOR, "#data-kept-text textarea").get_attribute("value"), 30,
               "a kept clip's transcript")
    link = wait_until(lambda: browser.find_element(By.CSS_SELECTOR, "#data-kept-audio a[download]").get_attribute("href"),
                      30, "the kept clip")
    clip = browser.execute_script("const a = new Audio(arguments[0]); document.body.appendChild(a); return a;", link)
    assert audio_loads(browser, clip)[1] > 0
    browser.save_screenshot(str(screenshots / "data.png"))
    open_tab(browser, "Speak")
    click(browser, "speak-refresh")
    # the export made in Listen comes first: Speak loads it as the server would
    wait_until(lambda: "export step_" in browser.find_element(By.CSS_SELECTOR, "#speak-model input").get_attribute("value"),
               30, "the export in Speak")
    type_into(browser, "speak-text", "Привет мир")
    wait_until(lambda: "script the model does not read (Cyrillic" in browser.find_element(
        By.CSS_SELECTOR, "#speak-normalized textarea").get_attribute("value"), 30, "the script message")
    click(browser, "speak-go")
    msg = wait_until(lambda: message(browser, "speak-message"), 60, "the refusal")
    assert "text: letters in a script the model does not read" in msg and "Traceback" not in msg
    type_into(browser, "speak-text", "በ2015 ሰላም።")
    wait_until(lambda: "ሁለት ሺህ" in browser.find_element(By.CSS_SELECTOR, "#speak-normalized textarea")
               .get_attribute("value"), 30, "the normalised text (numbers as words)")
    click(browser, "speak-go")
    wait_until(lambda: "Spoke" in text_of(browser, "speak-message"), 180, "the synthesis")
    # Gradio's player draws the waveform from the file its download link names: load that file in an audio element
    link = wait_until(lambda: browser.find_element(By.CSS_SELECTOR, "#speak-audio a[download]").get_attribute("href"),
                      30, "the speech file")
    assert AppServer.PREFIX in link  # served through the proxy path too
    audio = browser.execute_script("const a = new Audio(arguments[0]); document.body.appendChild(a); return a;", link)
    state = audio_loads(browser, audio)
    assert state[0] in (1, 2, 3, 4) and state[1] > 0, state
    browser.save_screenshot(str(screenshots / "speak.png"))


def _run_box(driver) -> str:
    return driver.find_element(By.CSS_SELECTOR, "#run-dir textarea, #run-dir input").get_attribute("value")


def test_a_reload_keeps_the_run_folder_the_page_was_showing(browser, app_server, tmp_path: Path):
    """The page keeps the folder in its address (?run=FOLDER) and shows it again after a reload (issue 31, item 10)."""
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
