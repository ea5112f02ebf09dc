"""The Listen and compare tab: each evaluation's samples, two checkpoints side by side, export."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from xtts_ft.errors import UserError
from xtts_ft.evaluate import export_from_checkpoint
from xtts_ft.inference.checkpoint_folder import base_for_checkpoint
from xtts_ft.layout import RunLayout
from xtts_ft.webapp import gradio_adapter, run_view
from xtts_ft.webapp.context import AppContext
from xtts_ft.webapp.gradio_adapter import Update

if TYPE_CHECKING:
    import gradio


def _step_choices(run_dir: Path, best: Optional[int]) -> list[tuple[str, int]]:
    steps = sorted(run_view.evaluations(run_dir))
    return [(f"step {s}" + (" ★ best" if s == best else ""), s) for s in reversed(steps)]


def _checkpoint_choices(run_dir: Path, best: Optional[int]) -> list[tuple[str, str]]:
    out = []
    for path in reversed(run_view.checkpoints(run_dir)):
        step = int(path.name.split("_")[1])
        out.append((f"{path.name}" + (" ★ best" if step == best else ""), str(path)))
    return out


def export_checkpoint(checkpoint: str, run_dir: Path) -> Path:
    """The project's own export (``python -m xtts_ft export``) into ``<run>/exports/<step>``."""
    ckpt = Path(checkpoint)
    out = RunLayout(run_dir).exports / ckpt.name
    return export_from_checkpoint(ckpt, out, base_for_checkpoint(ckpt, None))


def build(ctx: AppContext, run_box: gradio.Textbox) -> None:  # run_box: the page's run-folder box
    gr = gradio_adapter.gradio()
    refresh_btn = gr.Button("Refresh", elem_id="listen-refresh")
    best_line = gr.Markdown("", elem_id="listen-best")
    step_box = gr.Dropdown([], label="evaluation", elem_id="listen-step")
    table = gr.HTML("", elem_id="listen-samples")
    gr.Markdown("### Two checkpoints side by side (same sentence, same voice, same seed)")
    with gr.Row():
        step_a = gr.Dropdown([], label="checkpoint A", elem_id="listen-step-a")
        step_b = gr.Dropdown([], label="checkpoint B", elem_id="listen-step-b")
        sentence = gr.Dropdown([], label="sentence and voice", elem_id="listen-sentence")
    with gr.Row():
        side_a = gr.HTML("", elem_id="listen-a")
        side_b = gr.HTML("", elem_id="listen-b")
    gr.Markdown("### Export a checkpoint (a folder stock coqui-tts loads)")
    with gr.Row():
        ckpt_box = gr.Dropdown([], label="checkpoint", elem_id="listen-checkpoint")
        export_btn = gr.Button("Export", elem_id="listen-export")
    export_msg = gr.Markdown("", elem_id="listen-export-message")

    def refresh(run: str) -> tuple[str, Update, Update, Update, Update, Update, str, str, str]:
        run_dir = Path(run)
        best = run_view.best_step(run_dir)
        steps = _step_choices(run_dir, best)
        latest = steps[0][1] if steps else None
        first = steps[-1][1] if steps else None
        names = run_view.sample_names(run_dir, latest) if latest is not None else []
        ckpts = _checkpoint_choices(run_dir, best)
        line = f"Best checkpoint: step {best} (★)" if best is not None else "No best checkpoint yet."
        name = names[0][1] if names else None
        # the table and both players are filled here too, not left to the dropdowns' change events
        return (line, gr.update(choices=steps, value=latest), gr.update(choices=steps, value=first),
                gr.update(choices=steps, value=latest), gr.update(choices=names, value=name),
                gr.update(choices=ckpts, value=ckpts[0][1] if ckpts else None),
                show_table(run, latest), run_view.sample_player(run_dir, first, name, best),
                run_view.sample_player(run_dir, latest, name, best))

    def show_table(run: str, step: Optional[int]) -> str:  # the dropdowns' values are steps (_step_choices)
        return run_view.samples_table(Path(run), int(step)) if step is not None else "<p>No evaluation yet.</p>"

    def show_side(run: str, step: Optional[int], name: Optional[str]) -> str:
        run_dir = Path(run)
        best = run_view.best_step(run_dir)
        return run_view.sample_player(run_dir, int(step) if step is not None else None, name, best)

    def on_export(run: str, checkpoint: Optional[str]) -> str:
        if not checkpoint:
            return "- error: no checkpoint chosen; train until one is saved"
        try:
            out = export_checkpoint(checkpoint, Path(run))
        except UserError as exc:
            return "\n".join(f"- error: {line}" for line in str(exc).splitlines())
        return f"Exported {Path(checkpoint).name} to `{out}`"

    outputs = [best_line, step_box, step_a, step_b, sentence, ckpt_box, table, side_a, side_b]
    refresh_btn.click(refresh, run_box, outputs)
    run_box.change(refresh, run_box, outputs)
    ctx.on_load.append((refresh, run_box, outputs))
    step_box.change(show_table, [run_box, step_box], table)
    for box in (step_a, sentence):
        box.change(show_side, [run_box, step_a, sentence], side_a)
    for box in (step_b, sentence):
        box.change(show_side, [run_box, step_b, sentence], side_b)
    export_btn.click(on_export, [run_box, ckpt_box], export_msg)


