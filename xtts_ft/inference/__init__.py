"""Generation: what evaluation and the speech server both run to turn text and a voice into audio.

- ``loading``: a model for synthesis from an export folder or a checkpoint folder plus its base
- ``checkpoint_folder``: which checkpoint a path names, its base model, GPT weights and text settings
- ``conditioning``: a voice reference read and checked, and its conditioning latents
- ``batch_decode`` (+ ``decode_cache``, ``decode_graph``, ``head_graph``, ``prefill_graph``, ``step_in_flight``):
  the GPT decoding many requests together, its cache written in place, optionally through fixed shapes / CUDA graphs
- ``decoder_settings``: the one object that says how a decoder runs, made from the device and the settings
- ``vocoding``: HiFiGAN over whole utterances; ``streaming_vocoder``: over the windows of a stream

Nothing here imports ``evaluate`` or ``serve``; both import this package and nothing of each other.
"""
