"""Speaker similarity from XTTS's own speaker encoder, CER of the samples, and length buckets."""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile as sf

from tests.evaluate.evalhelpers import SR, voice_like
from xtts_ft.evaluate.hook import summarize
from xtts_ft.evaluate.intelligibility import length_bucket, score_samples, speaker_similarities
from xtts_ft.evaluate.synthesis import SampleResult


def _sample(path: Path, ref: Path, text: str, normalized: str, stop: bool) -> SampleResult:
    return SampleResult(
        name=path.stem, speaker="v", index=0, text=text, normalized_text=normalized, path=path, reference_wav=ref,
        sample_rate=SR, n_codes=10, max_codes=20, ended_with_stop=stop, duration_s=1.0, seconds_per_char=0.1,
        seconds_per_char_in_range=None, silence_ratio=0.1, synthesis_s=0.5, rtf=0.5,
    )


class FixedRecognizer:
    """Stands in for asr.model: hears a fixed text per file."""

    def __init__(self, heard: dict[str, str]) -> None:
        self.heard = heard

    def transcribe_files(self, paths):
        return [self.heard[Path(p).name] for p in paths]


@pytest.fixture
def wavs(tmp_path):
    out = {}
    for name, f0, seed in (("a", 120.0, 1), ("a_again", 120.0, 1), ("b", 240.0, 7)):
        out[name] = tmp_path / f"{name}.wav"
        sf.write(str(out[name]), voice_like(2.0, f0=f0, seed=seed), SR)
    return out


def test_similarity_is_one_for_the_same_audio_and_lower_for_another(trained, wavs):
    xtts = trained.xtts
    same, other = speaker_similarities(xtts, [(wavs["a_again"], wavs["a"]), (wavs["b"], wavs["a"])])
    assert same == pytest.approx(1.0, abs=1e-5)
    assert -1.0 <= other < same


def test_score_samples_fills_cer_and_similarity_and_buckets(trained, wavs):
    long_text = "ሀ" * 160
    samples = [
        _sample(wavs["a_again"], wavs["a"], "ሰላም።", "ሰላም.", stop=False),  # short, babbled
        _sample(wavs["b"], wavs["a"], long_text, long_text, stop=True),  # long, said right
    ]
    score_samples(samples, trained.xtts, FixedRecognizer({"a_again.wav": "ሰላም ሰላም", "b.wav": long_text}))
    assert samples[0].recognized_text == "ሰላም ሰላም" and samples[0].cer == pytest.approx(4 / 3)
    assert samples[1].cer == 0.0
    m = summarize(samples, [])
    assert m["sample_cer"] == pytest.approx(2 / 3)
    assert m["sample_cer_short"] == pytest.approx(4 / 3) and m["sample_stop_rate_short"] == 0.0
    assert m["sample_cer_long"] == 0.0 and m["sample_stop_rate_long"] == 1.0
    assert "sample_cer_medium" not in m
    assert m["sample_speaker_similarity"] == pytest.approx((1.0 + samples[1].speaker_similarity) / 2)


def test_without_a_recogniser_similarity_only(trained, wavs):
    samples = [_sample(wavs["a_again"], wavs["a"], "ሰላም", "ሰላም", stop=True)]
    score_samples(samples, trained.xtts, None)
    assert samples[0].cer is None and samples[0].speaker_similarity == pytest.approx(1.0, abs=1e-5)
    assert "sample_cer" not in summarize(samples, []) and "sample_speaker_similarity" in summarize(samples, [])


def test_length_buckets():
    assert length_bucket("ሰላም") == "short" and length_bucket("ሀ" * 19) == "short"  # under SHORT_TEXT_CHARS (20)
    assert length_bucket("ሀ" * 20) == "medium" and length_bucket("ሀ" * 150) == "medium"
    assert length_bucket("ሀ" * 151) == "long"
