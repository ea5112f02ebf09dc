"""Share a fine-tuned voice on the Hugging Face Hub: the export, a model card built from the run's own
records, a few evaluation samples (``python -m xtts_ft publish``; see :mod:`xtts_ft.publish.hub`)."""
