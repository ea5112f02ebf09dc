"""The page keeps the run folder it shows in its address (?run=FOLDER): read back on a reload (issue 31, item 10).

The browser side (the address written on a change, a reload showing the same folder) is the last test of
``test_browser.py``."""

from __future__ import annotations

from xtts_ft.webapp.app import KEEP_RUN_IN_ADDRESS, RUN_QUERY, run_from_query


def test_the_run_folder_comes_back_from_the_address():
    assert run_from_query({RUN_QUERY: " runs/other "}) == "runs/other"
    assert run_from_query({}) is None and run_from_query({RUN_QUERY: "  "}) is None  # the folder it opened on
    assert f"searchParams.set('{RUN_QUERY}', run)" in KEEP_RUN_IN_ADDRESS and "replaceState" in KEEP_RUN_IN_ADDRESS
