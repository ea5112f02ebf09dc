"""A card machine's environment checked in seconds, before its minutes go to benchmarks that would die at import.

    python3 benchmarks/card_env.py SITE    # what DIR/setup.sh (benchmarks/gpu_wheels.sh) runs last

The GPU machines' image has torch and torchaudio >= 2.9 without torchcodec. coqui-tts 0.28 then refuses to import:
its ``TTS/__init__.py`` asks whether torch's distribution is at 2.9 or later and whether a package named
``torchcodec`` can be found (``importlib.util.find_spec``), because torchaudio's ``load`` reads through torchcodec from
2.9 on. This project never loads audio through torchaudio (voice references included:
``xtts_ft.inference.conditioning.reference_audio``), so where coqui refuses for that reason, a placeholder ``torchcodec``
package goes into SITE: coqui finds it and imports, and anything that really imports torchcodec gets an ImportError
that says what it is. coqui's own check decides (``import TTS`` in a child process, before and after), not a copy of
it. Then the serving engine is imported and the demo's voice clip decoded as the engine reads a voice.

The last line is the verdict: ``card ready: ...`` (exit 0) or ``card set-up FAILED at <step>: <why>`` (exit 1).
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
VOICE = ROOT / "datasets" / "amharic_demo" / "wavs" / "spk1_001.flac"  # the demo voice the benchmarks speak with
PLACEHOLDER = (
    '"""A placeholder written by benchmarks/card_env.py: coqui-tts 0.28 imports only when a torchcodec package can be\n'
    'found under torch >= 2.9. This project reads audio with soundfile and never uses torchcodec."""\n\n'
    'raise ImportError("torchcodec is not installed on this machine (this is a placeholder so that coqui-tts imports; '
    'read audio with soundfile)")\n'
)


def coqui_refuses() -> Optional[str]:
    """Why ``import TTS`` fails in a fresh interpreter with this one's path (its exception, on one line), or None: it
    imports."""
    done = subprocess.run([sys.executable, "-c", "import TTS"], capture_output=True, text=True, timeout=120)
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if re.match(r"[\w.]+(Error|Exception)\b", line)]
    return " ".join(lines[starts[-1]:] if starts else lines[-1:]) or f"exit {done.returncode}"


def place_codec_placeholder(site: Path) -> str:
    """The placeholder into ``site`` (first on the path) where coqui-tts refuses to import for want of torchcodec; what
    was done, in a few words."""
    refused = coqui_refuses()
    if refused is None:
        return "it imports as installed"
    if "torchcodec" not in refused.lower():
        raise RuntimeError(f"coqui-tts does not import: {refused}")
    package = site / "torchcodec"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(PLACEHOLDER, encoding="utf-8")
    importlib.invalidate_caches()
    still = coqui_refuses()
    if still is not None:
        raise RuntimeError(f"coqui-tts still refuses with a torchcodec placeholder in {site} (is it first on "
                           f"PYTHONPATH?): {still}")
    return f"it wanted torchcodec: a placeholder in {site}"


def check(site: Path) -> str:
    """Every step in turn; the ready line."""
    step = "importing coqui-tts"
    try:
        coqui_note = place_codec_placeholder(site)
        step = "importing the serving engine"
        import torch
        import TTS

        import xtts_ft.serve.engine  # noqa: F401 (coqui, transformers and the engine's own modules)
        from xtts_ft.inference.conditioning import reference_audio

        step = f"decoding the demo voice {VOICE.relative_to(ROOT)}"
        rate = 22050
        audio = reference_audio(VOICE, rate)
        if audio.numel() == 0 or not bool(torch.isfinite(audio).all()):
            raise ValueError("no samples, or samples that are not finite")
    except Exception as exc:  # noqa: BLE001 - any failure here is the one line the person at the card needs
        said = str(exc).strip().splitlines()
        raise SystemExit(f"card set-up FAILED at {step}: {type(exc).__name__}" + (f": {said[0]}" if said else "")) from None
    card = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    return (f"card ready: torch {torch.__version__}, CUDA {torch.version.cuda} ({card}); coqui-tts {TTS.__version__} "
            f"({coqui_note}); serving engine imported; voice clip decoded ({audio.shape[-1] / rate:.2f} s)")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python3 benchmarks/card_env.py SITE (the folder first on PYTHONPATH)")
    print(check(Path(args[0])), flush=True)


if __name__ == "__main__":
    main()
