"""The Data tab: prepare a dataset folder or ingest uploaded recordings, then read the report and listen."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

from xtts_ft.config import DatasetConfig
from xtts_ft.config.schema import DATASET_FORMATS, field_help
from xtts_ft.errors import UserError
from xtts_ft.layout import RunLayout
from xtts_ft.webapp import dataset_view, gradio_adapter
from xtts_ft.webapp.context import AppContext
from xtts_ft.webapp.gradio_adapter import Update

if TYPE_CHECKING:
    import gradio

# one step of Prepare / Ingest: message, progress log, then the folder shown, its report and its rejected clips
# (each left as it is, an update with no properties, until the command ends)
_Step = tuple[str, str, str | Update, str | Update, Update]


def _error(text: str) -> str:
    return "\n".join(f"- error: {line}" for line in text.splitlines())


def build(ctx: AppContext, run_box: gradio.Textbox) -> None:  # run_box: the page's run-folder box
    gr = gradio_adapter.gradio()
    gr.Markdown("Prepare a dataset folder (the same checks the training run applies), or cut long recordings "
                "into clips. The report below is the run's own `data/report.json` until you prepare another folder.")
    with gr.Row():
        path_box = gr.Textbox(label="dataset folder", info=field_help(DatasetConfig, "path"), elem_id="data-path")
        fmt_box = gr.Dropdown(list(DATASET_FORMATS), value="auto", label="format", info=field_help(DatasetConfig, "format"),
                              elem_id="data-format")
        out_box = gr.Textbox(label="prepared output folder", info="Where metadata_*.csv, wavs/ and report.json go.",
                             elem_id="data-out")
    first = dataset_view.data_config(ctx.config, ctx.run_dir)
    config_box = gr.Textbox(str(first or ""), label="config", elem_id="data-config",
                            info="Its dataset.*, ingest.* and asr.model settings apply, as in the run (the app's "
                                 "--config, else the run's config.yaml); empty: the schema's defaults.")
    prepare_btn = gr.Button("Prepare", variant="primary", elem_id="data-prepare")
    with gr.Accordion("Or upload long recordings with their text or subtitles (ingest)", open=False):
        with gr.Row():
            audio_files = gr.File(file_count="multiple", label="recordings", elem_id="data-upload-audio")
            text_file = gr.File(label="text they read (UTF-8)", elem_id="data-upload-text")
            subs_file = gr.File(label="or subtitles (.srt / .vtt)", elem_id="data-upload-subs")
        ingest_btn = gr.Button("Ingest", elem_id="data-ingest")
    message = gr.Markdown("", elem_id="data-message")
    log_box = gr.Textbox("", label="progress", lines=8, max_lines=8, interactive=False, elem_id="data-log")
    shown = gr.Textbox("", label="report of", interactive=False, elem_id="data-shown")
    report = gr.Markdown("", elem_id="data-report")
    with gr.Row():
        kept_btn = gr.Button("Play a random kept clip", elem_id="data-random")
        kept_text = gr.Textbox("", label="its transcript", interactive=False, elem_id="data-kept-text")
        kept_audio = gr.Audio(type="filepath", interactive=False, label="kept clip", elem_id="data-kept-audio")
    with gr.Row():
        rejected_box = gr.Dropdown([], label="rejected clip (reason)", elem_id="data-rejected")
        rejected_audio = gr.Audio(type="filepath", interactive=False, label="rejected clip", elem_id="data-rejected-audio")

    def show(folder: str) -> tuple[str, str, Update]:
        rows = dataset_view.rejected_clips(Path(folder))
        choices = [(f"{r.get('reason')}: {r.get('clip_id')} ({r.get('detail')})", str(i)) for i, r in enumerate(rows)]
        return folder, dataset_view.report_markdown(Path(folder)), gr.update(choices=choices, value=None)

    def on_load(run: str) -> tuple[str, str, Update, str]:
        config = dataset_view.data_config(ctx.config, Path(run))
        return (*show(str(RunLayout(Path(run)).data)), str(config or ""))

    def on_prepare(path: str, fmt: str, out: str, config: str) -> Iterator[_Step]:
        try:
            dataset_view.check_dataset(path, fmt)
            dataset_view.check_out(out, "prepare", ctx.cwd)
            checked = dataset_view.check_config(config, ctx.cwd)
        except UserError as exc:
            yield _error(str(exc)), "", gr.update(), gr.update(), gr.update()
            return
        yield from _run(dataset_view.prepare_command(path, out, fmt, checked), out)

    # gr.File hands over the uploaded files' paths (one list for file_count="multiple"), None when empty
    def on_ingest(audio: Optional[list[str]], text: Optional[str], subs: Optional[str], out: str,
                  config: str) -> Iterator[_Step]:
        try:
            if not audio:
                raise UserError("recordings: none uploaded")
            dataset_view.check_out(out, "ingest", ctx.cwd)
            checked = dataset_view.check_config(config, ctx.cwd)
        except UserError as exc:
            yield _error(str(exc)), "", gr.update(), gr.update(), gr.update()
            return
        yield from _run(dataset_view.ingest_command([str(a) for a in audio], out, text, subs, checked), out)

    def _run(command: list[str], out: str) -> Iterator[_Step]:
        log, code = "", None
        for log, code in dataset_view.stream_command(command, ctx.cwd):  # noqa: B007 - the last pair is used below
            yield "running ...", log, gr.update(), gr.update(), gr.update()
        errors = [line.removeprefix("error: ") for line in log.splitlines() if line.startswith("error: ")]
        if code:
            yield _error("\n".join(errors) or f"exit code {code}"), log, gr.update(), gr.update(), gr.update()
            return
        folder, text, rejected = show(str(Path(ctx.cwd) / out.strip()))
        yield "done.", log, folder, text, rejected

    def on_random(folder: str) -> tuple[str, Optional[str]]:
        found = dataset_view.random_kept_clip(Path(folder))
        return (found[1], str(found[0])) if found else ("no kept clip in this folder", None)

    def on_rejected(folder: str, choice: Optional[str]) -> Optional[str]:
        rows = dataset_view.rejected_clips(Path(folder))
        if choice is None or int(choice) >= len(rows):
            return None
        audio = dataset_view.rejected_audio(Path(folder), rows[int(choice)])
        return str(audio) if audio else None

    outputs = [message, log_box, shown, report, rejected_box]
    prepare_btn.click(on_prepare, [path_box, fmt_box, out_box, config_box], outputs)
    ingest_btn.click(on_ingest, [audio_files, text_file, subs_file, out_box, config_box], outputs)
    run_box.change(on_load, run_box, [shown, report, rejected_box, config_box])
    ctx.on_load.append((on_load, run_box, [shown, report, rejected_box, config_box]))
    kept_btn.click(on_random, shown, [kept_text, kept_audio])
    rejected_box.change(on_rejected, [shown, rejected_box], rejected_audio)
