"""The one place Gradio is imported.

Gradio takes seconds to import and only ``python -m xtts_ft ui`` needs it, so the page builders
(``app.build_app`` and each tab's ``build``) ask this module for it when they run instead of importing it
at the top of their files. Everything else in the package, including the command line, never loads it.
(The tabs name Gradio's classes in annotations under ``TYPE_CHECKING``, which imports nothing at run time;
mypy reads Gradio as untyped, so those names are Any to it: see pyproject.toml.)
"""

from __future__ import annotations

from types import ModuleType

# What ``gr.update(...)`` returns: the properties to change on an output component, which Gradio sends as a dict.
Update = dict[str, object]


def gradio() -> ModuleType:
    """The ``gradio`` module (imported on the first call; Python caches it after that)."""
    import gradio as gr

    module: ModuleType = gr  # mypy reads gradio as untyped (pyproject.toml): this names what it is
    return module
