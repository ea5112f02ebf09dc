"""Assemble the web app: a run-folder box above four tabs (Data, Train, Listen and compare, Speak).

Everything the page shows is read from the run folder on each refresh; the app keeps no state of
its own beyond what a tab is showing. The run folder shown is kept in the page's address
(``?run=FOLDER``), so a reload, a bookmark or a second tab opened from it shows the same folder.
Served by Gradio (its own FastAPI + uvicorn); ``root_path`` lets it work behind a proxy path (a
Lightning Studio port view, a reverse proxy).
"""

# No ``from __future__ import annotations`` here: Gradio finds the ``gr.Request`` parameter of ``restore``
# by its annotation, which must be the class itself (``gr`` is a local name, a string would not resolve).
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional

from xtts_ft.errors import ConfigError
from xtts_ft.webapp import data_tab, gradio_adapter, listen_tab, speak_tab, train_tab
from xtts_ft.webapp.context import AppContext

if TYPE_CHECKING:
    import gradio

CSS = """
#train-curves svg { width: 100%; height: auto; }
table.samples td, table.samples th { padding: 4px 8px; border-bottom: 1px solid #ddd; text-align: left; }
.best { color: #b8860b; }
"""

RUN_QUERY = "run"  # ?run=FOLDER in the page's address
KEEP_RUN_IN_ADDRESS = (
    "(run) => { const u = new URL(window.location.href); u.searchParams.set('" + RUN_QUERY + "', run);"
    " window.history.replaceState(window.history.state, '', u); }"
)


def build_app(ctx: AppContext) -> "gradio.Blocks":
    gr = gradio_adapter.gradio()
    with gr.Blocks(title="xtts-ft", analytics_enabled=False) as app:  # no calls home: Studios and tests run offline
        gr.Markdown("## xtts-ft: fine-tune XTTS-v2 on Amharic")
        run_box = gr.Textbox(str(ctx.run_dir), label="run folder (run.output_dir)", elem_id="run-dir",
                             info="Everything below is read from this folder; a run started here writes into it.")
        with gr.Tabs():
            with gr.Tab("Data", id="data"):
                data_tab.build(ctx, run_box)
            with gr.Tab("Train", id="train"):
                train_tab.build(ctx, run_box)
            with gr.Tab("Listen and compare", id="listen"):
                listen_tab.build(ctx, run_box)
            with gr.Tab("Speak", id="speak"):
                speak_tab.build(ctx, run_box)
        # the address keeps the folder: written on every change, read back first when the page (re)loads
        run_box.change(None, run_box, None, js=KEEP_RUN_IN_ADDRESS)

        # mypy cannot read a class off a module held in a variable; Gradio needs the class itself here
        def restore(request: gr.Request) -> "str | gradio_adapter.Update":  # type: ignore[name-defined]
            return run_from_query(request.query_params if request is not None else {}) or gr.update()

        load = app.load(restore, None, run_box)
        for fn, inputs, outputs in ctx.on_load:
            load.then(fn, inputs, outputs)
    return app


def run_from_query(query: Mapping[str, str]) -> Optional[str]:
    """The run folder named in the page's address, or None (the page keeps the one it opened on)."""
    value = (query.get(RUN_QUERY) or "").strip()
    return value or None


def parse_auth(text: Optional[str]) -> Optional[tuple[str, str]]:
    if not text:
        return None
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise ConfigError("--auth: expected USER:PASS (both non-empty), e.g. --auth me:secret")
    return user, password


def serve(run_dir: Path, *, host: str, port: int, auth: Optional[str], root_path: Optional[str],
          config: Optional[Path], cwd: Optional[Path] = None, speech_device: Optional[str] = None) -> None:
    """Build the app and serve it until interrupted (training processes it started keep going).
    ``speech_device``: where the Speak tab's model runs (None: CUDA when visible, else the CPU)."""
    cwd = Path(cwd or Path.cwd())
    if config is not None and not Path(config).is_file():
        raise ConfigError(f"--config {config}: config file not found; pass a YAML file (see configs/)")
    ctx = AppContext(run_dir=Path(run_dir), cwd=cwd, configs_dir=cwd / "configs", config=config,
                     speech_device=speech_device)
    app = build_app(ctx)
    # the page plays files of the run folder (samples, dataset clips) and of folders beside it
    allowed = {str(Path(run_dir).resolve().parent), str(cwd.resolve())}
    app.queue(default_concurrency_limit=4).launch(
        server_name=host, server_port=port, auth=parse_auth(auth), root_path=root_path or None,
        allowed_paths=sorted(allowed), css=CSS, footer_links=[], quiet=False, show_error=False,
    )
