"""The Speak tab: any checkpoint or export, a text and what the model will read, a voice, audio in the page."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from xtts_ft.config import EvaluationConfig, ServeConfig
from xtts_ft.config.schema import field_help
from xtts_ft.errors import UserError
from xtts_ft.webapp import gradio_adapter, run_view
from xtts_ft.webapp.context import AppContext
from xtts_ft.webapp.gradio_adapter import Update
from xtts_ft.webapp.speak import (
    EngineHolder,
    SpeakSettings,
    model_choices,
    reading,
    speak,
    text_limit,
    text_settings,
    voice_choices,
)

if TYPE_CHECKING:
    import gradio


def _error(exc: UserError) -> str:
    return "\n".join(f"- error: {line}" for line in str(exc).splitlines())


def build(ctx: AppContext, run_box: gradio.Textbox) -> None:  # run_box: the page's run-folder box
    gr = gradio_adapter.gradio()
    out_dir = Path(tempfile.mkdtemp(prefix="xtts_ft_speak_"))  # what the page plays; never inside the run folder
    holder = EngineHolder(ctx.speech_device)
    refresh_btn = gr.Button("Refresh", elem_id="speak-refresh")
    model_box = gr.Dropdown([], label="model (checkpoint or export)", elem_id="speak-model")
    text_box = gr.Textbox("ሰላም።", label="text", lines=2, elem_id="speak-text",
                          info=f"At most the run's serve.max_input_chars characters, the server's limit "
                               f"({ServeConfig.max_input_chars} unless its config says otherwise).")
    reads_box = gr.Textbox("", label="what the model will read", interactive=False, elem_id="speak-normalized")
    with gr.Row():
        voice_box = gr.Dropdown([], label="voice from the dataset", elem_id="speak-voice")
        upload = gr.Audio(sources=["upload", "microphone"], type="filepath", label="or your own clip (3-10 s)",
                          elem_id="speak-upload")
    with gr.Row():
        temperature = gr.Slider(0.05, 1.5, value=EvaluationConfig.temperature, step=0.05, label="temperature",
                                info=field_help(EvaluationConfig, "temperature"), elem_id="speak-temperature")
        max_tokens = gr.Number(None, precision=0, label="max audio codes per piece",
                               info=field_help(EvaluationConfig, "max_new_tokens"), elem_id="speak-max-tokens")
    speak_btn = gr.Button("Speak", variant="primary", elem_id="speak-go")
    message = gr.Markdown("", elem_id="speak-message")
    audio = gr.Audio(label="speech", type="filepath", interactive=False, elem_id="speak-audio")

    def refresh(run: str) -> tuple[Update, Update, object]:  # the last: max_new_tokens as the config says
        run_dir = Path(run)
        models, voices = model_choices(run_dir), voice_choices(run_dir)
        tokens = (run_view.run_config(run_dir).get("evaluation") or {}).get("max_new_tokens")
        return (gr.update(choices=models, value=models[0][1] if models else None),
                gr.update(choices=voices, value=voices[0][1] if voices else None), tokens)

    def show_reading(model: Optional[str], text: str, run: str) -> str:
        if not model or not text.strip():
            return ""
        try:
            return reading(text, text_settings(Path(model)), text_limit(Path(run)))
        except UserError as exc:
            return str(exc)

    # the dropdowns and the upload hand over paths (None: nothing chosen); the slider a float, the number box a
    # float or None
    def on_speak(model: Optional[str], text: str, voice: Optional[str], uploaded: Optional[str], temp: float,
                 tokens: Optional[float], run: str) -> tuple[str, Optional[str]]:
        if not model:
            return "- error: no model yet; train until a checkpoint is saved, or export one", None
        clip = uploaded or voice
        if not clip:
            return "- error: no voice; choose a dataset clip or upload one", None
        out = out_dir / f"speech_{time.strftime('%H%M%S')}_{int(time.time() * 1000) % 1000:03d}.wav"
        settings = SpeakSettings(float(temp), int(tokens) if tokens else None)
        try:
            path = speak(holder, Path(model), text, Path(clip), out, settings, text_limit(Path(run)))
        except UserError as exc:
            return _error(exc), None
        return f"Spoke with {Path(model).name}: `{reading(text, text_settings(Path(model)))}`", str(path)

    outputs = [model_box, voice_box, max_tokens]
    refresh_btn.click(refresh, run_box, outputs)
    run_box.change(refresh, run_box, outputs)
    ctx.on_load.append((refresh, run_box, outputs))
    for box in (text_box, model_box):
        box.change(show_reading, [model_box, text_box, run_box], reads_box)
    speak_btn.click(on_speak, [model_box, text_box, voice_box, upload, temperature, max_tokens, run_box],
                    [message, audio])
