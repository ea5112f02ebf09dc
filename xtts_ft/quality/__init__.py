"""Listening to audio without a transcript: where the speech is, how noisy it is, how good it sounds.

- ``onnx_models``: the two ONNX models, loaded once per process (the one module that imports onnxruntime
  and speechmos): silero-vad's whole-clip model and DNSMOS P.835;
- ``voice_activity``: speech probability per 32 ms window, the speech/pause mask, the SNR estimate
  (speech windows against pause windows) and the seconds of speech after a moment;
- ``predictor``: DNSMOS's predicted overall quality (1-5) of a clip.

Numpy, soundfile and onnxruntime only (no torch): prepare's worker processes use it.
"""
