"""The one place Gradio is imported.

Gradio takes seconds to import and only ``python -m xtts_ft ui`` needs it, so the page builders
(``app.build_app`` and each tab's ``build``) ask this module for it when they run instead of importing it
at the top of their files. Everything else in the package, including the command line, never loads it.
"""

from __future__ import annotations


def gradio():
    """The ``gradio`` module (imported on the first call; Python caches it after that)."""
    import gradio as gr

    return gr
