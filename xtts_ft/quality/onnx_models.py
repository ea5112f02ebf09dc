"""The ONNX models that listen to audio, loaded once per process: silero-vad and DNSMOS.

The one module that imports ``onnxruntime`` and ``speechmos`` (inside its functions: a command that never
listens never pays for them; utils/import_graph.py ``ADAPTERS``). Both models ship inside their wheels, so
nothing is downloaded.

- silero-vad's *sequence* model (``silero_vad/data/silero_vad_16k_sequence.onnx``, silero-vad >= 6.2): the
  same network as its streaming model, run over a whole clip in one call. The file is found through the
  installed distribution's file list, not by importing ``silero_vad``: that package imports torch and sets
  ``torch.set_num_threads(1)`` when imported, which prepare's worker processes (no torch) and a training
  process (its own thread count) must not get.
- DNSMOS P.835 (``speechmos``, Microsoft's ONNX models): speechmos builds its ONNX sessions with default
  options (one thread per core); ours are built with one thread each, so scoring in an evaluation or in
  prepare's workers never competes with training or the other workers for cores.
"""

from __future__ import annotations

import functools
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from xtts_ft.errors import ModelError

if TYPE_CHECKING:  # names for annotations; at run time each is imported where it is first used
    import onnxruntime
    from speechmos import dnsmos as speechmos_dnsmos

VAD_DISTRIBUTION = "silero-vad"
VAD_MODEL_FILE = "silero_vad/data/silero_vad_16k_sequence.onnx"
ONNX_THREADS = 1


def _session(path: Path) -> onnxruntime.InferenceSession:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = ONNX_THREADS
    options.inter_op_num_threads = ONNX_THREADS
    options.log_severity_level = 3  # errors only: its warnings about unused initialisers are not ours to fix
    return onnxruntime.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


@functools.cache
def vad_session() -> onnxruntime.InferenceSession:
    """silero-vad's sequence model as an onnxruntime session (inputs ``input``, ``h``, ``c``)."""
    try:
        path = Path(str(metadata.distribution(VAD_DISTRIBUTION).locate_file(VAD_MODEL_FILE)))
    except metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise ModelError(f"silero-vad's model file {VAD_MODEL_FILE} is not installed; install the pinned "
                         f"requirements (pip install -r requirements.txt)")
    return _session(path)


@functools.cache
def dnsmos() -> speechmos_dnsmos.DNSMOS:
    """speechmos's DNSMOS (P.835 signal/background/overall and P.808) with single-threaded sessions."""
    from speechmos import dnsmos as speechmos_dnsmos

    folder = Path(speechmos_dnsmos.__file__).parent / "dnsmos_models"

    class SingleThreadDNSMOS(speechmos_dnsmos.DNSMOS):
        def __init__(self) -> None:  # the parent's, with our session options (the attributes it reads)
            self.primary_model_path = str(folder / "sig_bak_ovr.onnx")
            self.onnx_sess = _session(folder / "sig_bak_ovr.onnx")
            self.p808_onnx_sess = _session(folder / "model_v8.onnx")

    return SingleThreadDNSMOS()
