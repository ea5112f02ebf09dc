"""Serving a trained voice: the model a path names (:mod:`.model_source`), the one synthesis engine
(:mod:`.engine`), the OpenAI-compatible HTTP server and the Wyoming server on top of it."""
