"""Speech recognition for Amharic: hear what a model says and what a dataset's clips say.

(How recognised text is scored, CER and WER, is pure text work: :mod:`xtts_ft.text.error_rates`, below data and asr.)
- ``model_files``: ``asr.model`` as a local folder or a Hugging Face repo fetched into the hub cache
- ``recognizer``: ``Recognizer`` (transformers CTC model, 16 kHz, batched, greedy CTC decoding)
- ``command``: ``python -m xtts_ft transcribe``
- ``small_model/``: a small recogniser trained on espeak-ng speech by ``utils/train_small_asr.py``
  (for the demo and the tests; configs/demo.yaml names it, nothing uses it unless configured)
"""

from pathlib import Path

SMALL_MODEL_DIR = Path(__file__).resolve().parent / "small_model"
