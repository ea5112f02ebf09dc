"""The web app (``python -m xtts_ft ui``): a second face on the same pipeline, never a second implementation.

``app.py`` assembles the page; one module per tab (``data_tab``, ``train_tab``, ``listen_tab``,
``speak_tab``); ``process.py`` starts, finds, stops and resumes the training process and knows nothing
of Gradio; ``run_view.py``, ``train_form.py``, ``dataset_view.py`` and ``speak.py`` read the run folder
and call the project's own code, also without Gradio.
"""
