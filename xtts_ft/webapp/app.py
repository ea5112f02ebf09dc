"""Assemble the web app: a run-folder box above four tabs (Data, Train, Listen and compare, Speak).

Everything the page shows is read from the run folder on each refresh; the app keeps no state of
its own beyond what a tab is showing. Served by Gradio (its own FastAPI + uvicorn); ``root_path``
lets it work behind a proxy path (a Lightning Studio port view, a reverse proxy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from xtts_ft.errors import ConfigError
from xtts_ft.webapp import data_tab, gradio_adapter, listen_tab, speak_tab, train_tab
from xtts_ft.webapp.context import AppContext

CSS = """
#train-curves svg { width: 100%; height: auto; }
table.samples td, table.samples th { padding: 4px 8px; border-bottom: 1px solid #ddd; text-align: left; }
.best { color: #b8860b; }
"""


def build_app(ctx: AppContext):
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
        for fn, inputs, outputs in ctx.on_load:
            app.load(fn, inputs, outputs)
    return app


def parse_auth(text: Optional[str]) -> Optional[tuple[str, str]]:
    if not text:
        return None
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise ConfigError("--auth: expected USER:PASS (both non-empty), e.g. --auth me:secret")
    return user, password


def serve(run_dir: Path, *, host: str, port: int, auth: Optional[str], root_path: Optional[str],
          config: Optional[Path], cwd: Optional[Path] = None) -> None:
    """Build the app and serve it until interrupted (training processes it started keep going)."""
    cwd = Path(cwd or Path.cwd())
    if config is not None and not Path(config).is_file():
        raise ConfigError(f"--config {config}: config file not found; pass a YAML file (see configs/)")
    ctx = AppContext(run_dir=Path(run_dir), cwd=cwd, configs_dir=cwd / "configs", config=config)
    app = build_app(ctx)
    # the page plays files of the run folder (samples, dataset clips) and of folders beside it
    allowed = {str(Path(run_dir).resolve().parent), str(cwd.resolve())}
    app.queue(default_concurrency_limit=4).launch(
        server_name=host, server_port=port, auth=parse_auth(auth), root_path=root_path or None,
        allowed_paths=sorted(allowed), css=CSS, footer_links=[], quiet=False, show_error=False,
    )
