"""The Train tab: the schema-built form, Start / Stop / Resume, and the live view of the run folder."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from xtts_ft.errors import UserError
from xtts_ft.run_history import metrics_version
from xtts_ft.webapp import gradio_adapter, run_view
from xtts_ft.webapp.context import AppContext
from xtts_ft.webapp.gradio_adapter import Update
from xtts_ft.webapp.train_form import check_form, config_choices, config_values, form_fields, overrides_from_form

if TYPE_CHECKING:
    import gradio

REFRESH_S = 2.0


class _SvgCache:
    """The curves SVG is drawn again only when metrics.jsonl changed (drawing costs more than reading)."""

    def __init__(self) -> None:
        self.key: Optional[tuple[str, int, int]] = None  # metrics.jsonl's version when the SVG was drawn
        self.svg = ""

    def get(self, run_dir: Path) -> str:
        key = metrics_version(run_dir)
        if key != self.key:
            self.svg, self.key = run_view.curves_svg(run_dir), key
        return self.svg


def build(ctx: AppContext, run_box: gradio.Textbox) -> None:  # run_box: the page's run-folder box
    gr = gradio_adapter.gradio()
    fields = form_fields()
    svg_cache = _SvgCache()
    choices = config_choices(ctx.configs_dir, ctx.run_dir, ctx.config)
    first = str(ctx.config) if ctx.config else (choices[0] if choices else "")
    values = config_values(Path(first), fields) if first else {}

    config_box = gr.Dropdown(choices, value=first, label="config", allow_custom_value=True, elem_id="train-config",
                             info="A YAML file: configs/*.yaml or the run's own config.yaml.")
    inputs: list[gradio.Dropdown | gradio.Textbox] = []
    with gr.Row():
        for f in fields:
            if f.choices:
                inputs.append(gr.Dropdown(list(f.choices), value=values.get(f.key), label=f.label, info=f.help,
                                          elem_id=f.elem_id))
            else:
                inputs.append(gr.Textbox(value=values.get(f.key), label=f.label, info=f.help, elem_id=f.elem_id))
    with gr.Row():
        check_btn = gr.Button("Check", elem_id="train-check")
        start_btn = gr.Button("Start", variant="primary", elem_id="train-start")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="train-stop")
        resume_btn = gr.Button("Resume", elem_id="train-resume")
    message = gr.Markdown("", elem_id="train-message")
    status = gr.Markdown("", elem_id="train-status")
    progress = gr.Markdown("", elem_id="train-progress")
    curves = gr.HTML("", elem_id="train-curves")
    log_box = gr.Textbox("", label="log", lines=14, max_lines=14, interactive=False, elem_id="train-log")

    # the form's fields hand over their text (a dropdown with nothing chosen: None)
    def form(config: str, run: str, *vals: Optional[str]) -> tuple[Path, list[str]]:
        config_path = Path(config)
        given = dict(zip((f.key for f in fields), vals))
        return config_path, overrides_from_form(given, config_path, fields)

    def on_config(config: str) -> list[Update]:
        vals = config_values(Path(config), fields)
        return [gr.update(value=vals[f.key]) for f in fields]

    def on_check(config: str, run: str, *vals: Optional[str]) -> str:
        config_path, overrides = form(config, run, *vals)
        problem = check_form(config_path, Path(run), overrides)
        return _message(problem) if problem else "The config loads: ready to start."

    def on_start(config: str, run: str, *vals: Optional[str]) -> str:
        config_path, overrides = form(config, run, *vals)
        problem = check_form(config_path, Path(run), overrides)
        if problem:
            return _message(problem)
        try:
            record = ctx.controller(Path(run)).start(config_path, overrides)
        except UserError as exc:
            return _message(str(exc))
        return f"Started (pid {record.pid}): `{' '.join(record.command[1:])}`"

    def on_stop(run: str) -> str:
        try:
            pid = ctx.controller(Path(run)).stop()
        except UserError as exc:
            return _message(str(exc))
        return f"Sent SIGTERM to pid {pid}: the run saves its step and records the stop."

    def on_resume(run: str) -> str:
        try:
            record = ctx.controller(Path(run)).resume()
        except UserError as exc:
            return _message(str(exc))
        return f"Resumed (pid {record.pid}): `{' '.join(record.command[1:])}`"

    def refresh(run: str) -> tuple[str, str, str, str]:
        run_dir = Path(run)
        controller = ctx.controller(run_dir)
        state = controller.state()
        line = f"**{state.phase}**: {state.detail}"
        if state.resume_command:
            line += f"  \nresume command: `{state.resume_command}`"
        return line, run_view.progress(run_dir).line(), svg_cache.get(run_dir), controller.log_tail()

    config_box.change(on_config, config_box, inputs)
    check_btn.click(on_check, [config_box, run_box, *inputs], message)
    start_btn.click(on_start, [config_box, run_box, *inputs], message)
    stop_btn.click(on_stop, run_box, message)
    resume_btn.click(on_resume, run_box, message)
    timer = gr.Timer(REFRESH_S)
    # one refresh at a time, on a worker of its own: a slow refresh on a busy machine skips ticks instead of
    # queueing them in front of what a person clicked
    timer.tick(refresh, run_box, [status, progress, curves, log_box], show_progress="hidden", trigger_mode="once",
               concurrency_limit=1, concurrency_id="train-refresh")
    run_box.change(refresh, run_box, [status, progress, curves, log_box])
    ctx.on_load.append((refresh, run_box, [status, progress, curves, log_box]))


def _message(text: str) -> str:
    """A user mistake as the page shows it: the loader's lines, no traceback."""
    return "\n".join(f"- error: {line}" for line in text.splitlines())
