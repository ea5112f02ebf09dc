"""Synthesise test sentences with an in-memory Xtts, and measure each sample cheaply.

The GPT is made ready for generation the way coqui's ``GPTTrainer.test_run`` does it
(``init_gpt_for_inference``), and the inference copies it adds (``gpt.gpt_inference`` and
``gpt.gpt.wte``) are removed afterwards, so the same model keeps training and its state dict
keeps its keys. Every module's train/eval flag is restored, and the random generators are
forked: evaluating never changes the training run's random stream.

The GPT decodes every sample of a call together (:mod:`xtts_ft.inference.batch_decode`: the codes each sample
would get from ``Xtts.inference`` alone, with the same seed), and HiFiGAN then vocodes each one.
Whether generation ended with the stop token or ran into the length limit is read from the
generated codes themselves. During training every module checks the run's stop request
(:func:`stop_checks`; an untrained GPT runs every sample to the length limit, which takes minutes
with the full model), so a SIGTERM during evaluation is acted on within seconds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence

import numpy as np
import numpy.typing as npt
import soundfile as sf
import torch

from xtts_ft.errors import DataError
from xtts_ft.evaluate.metrics import in_range, seconds_per_char, silence_ratio
from xtts_ft.inference.batch_decode import DecodeRequest, Sampling, decode_all, prefix_embeddings
from xtts_ft.inference.conditioning import Latents, check_language, check_reference, conditioning
from xtts_ft.inference.decoder_settings import decoder_settings
from xtts_ft.inference.vocoding import vocode_all
from xtts_ft.stop_signals import raise_if_stopped, stopping_enabled
from xtts_ft.tempfiles import atomic_write

if TYPE_CHECKING:
    from TTS.tts.models.xtts import Xtts

    from xtts_ft.json_types import JsonObject
    from xtts_ft.tokenizer import AmharicTokenizer

log = logging.getLogger(__name__)

EVAL_BATCH = 32  # most samples whose GPT decodes together (each row holds a KV cache: memory)


@dataclass
class SampleResult:
    """One synthesised WAV and its cheap objective checks."""

    name: str  # file stem, e.g. "speaker_0"
    speaker: str  # stem of the reference wav
    index: int  # sentence (or eval clip) index
    text: str  # as given
    normalized_text: str  # what the tokenizer's front-end made of it (what was encoded)
    path: Path
    reference_wav: Path
    sample_rate: int
    n_codes: int  # audio codes generated, the stop token included
    max_codes: int  # the length limit in force
    ended_with_stop: bool  # False: ran into the length limit (babbling)
    duration_s: float
    seconds_per_char: float
    seconds_per_char_in_range: Optional[bool]  # None when no training range is known
    silence_ratio: float  # share of 20 ms frames below -40 dBFS
    synthesis_s: float  # wall time of xtts.inference
    rtf: float  # synthesis_s / duration_s
    mcd: Optional[float] = None  # against the recording, for eval clips only
    recognized_text: Optional[str] = None  # what the speech recogniser heard (evaluation.recognize)
    cer: Optional[float] = None  # of recognized_text against text (xtts_ft.text.error_rates)
    speaker_similarity: Optional[float] = None  # cosine of XTTS speaker embeddings, sample vs reference
    quality_mos: Optional[float] = None  # DNSMOS's predicted overall quality, 1-5 (evaluation.quality)
    snr_db: Optional[float] = None  # the SNR estimate (evaluation.quality)
    tail_s: Optional[float] = None  # seconds of speech after the text's last word (evaluation.quality + recognize)

    def to_json(self, relative_to: Optional[Path] = None) -> JsonObject:
        """A JSON-ready dict; paths relative to ``relative_to`` when inside it, else absolute."""
        out = asdict(self)
        for key in ("path", "reference_wav"):
            p = Path(out[key]).resolve()
            if relative_to is not None and p.is_relative_to(Path(relative_to).resolve()):
                p = p.relative_to(Path(relative_to).resolve())
            out[key] = p.as_posix()
        return out


@contextlib.contextmanager
def stop_checks(xtts: Xtts, check: Optional[Callable[[], None]] = None) -> Iterator[None]:
    """Inside a training run: every module of ``xtts`` checks the run's stop request before it runs.

    One sample passes through the speaker encoder, the GPT (once per generated token) and the HiFiGAN
    decoder; on a CPU or with the full model each of these takes seconds, so checking only between
    samples or tokens is not enough for a stop within seconds. Forward pre-hooks, removed on exit, check
    at every layer instead; outside training (no stop to honour) nothing is registered. ``check``
    replaces the training stop check with the caller's own (it raises to abandon the work: the speech
    server's "client went away").
    """
    if check is None:
        if not stopping_enabled():
            yield
            return
        check = lambda: raise_if_stopped("sample synthesis")  # noqa: E731
    handles = [m.register_forward_pre_hook(lambda *_: check()) for m in xtts.modules()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def gpt_ready_for_inference(xtts: Xtts, max_new_tokens: Optional[int] = None) -> Iterator[None]:
    """Inside: GPT in inference mode (limit lowered to ``max_new_tokens``); after: exactly as before."""
    gpt = xtts.gpt
    had_inference = "gpt_inference" in gpt._modules
    had_wte = "wte" in gpt.gpt._modules
    modes = [(m, m.training) for m in xtts.modules()]
    max_gen = gpt.max_gen_mel_tokens
    if not had_inference:
        gpt.init_gpt_for_inference(kv_cache=True)
    xtts.train(False)  # not xtts.eval(): Xtts.eval() builds a second set of inference copies
    if max_new_tokens is not None:
        gpt.max_gen_mel_tokens = min(int(max_new_tokens), max_gen)  # instance attribute read by GPT.generate
    try:
        yield
    finally:
        gpt.max_gen_mel_tokens = max_gen
        if not had_inference:
            del gpt.gpt_inference
            if not had_wte and "wte" in gpt.gpt._modules:
                del gpt.gpt.wte
        for module, mode in modes:
            module.training = mode


def _synchronize(xtts: Xtts) -> None:
    if next(xtts.parameters()).is_cuda:
        torch.cuda.synchronize()


def _rng_devices(xtts: Xtts) -> list[int]:
    device = next(xtts.parameters()).device
    return [device.index or 0] if device.type == "cuda" else []


def _write_wav(path: Path, wav: npt.NDArray[np.float32], sr: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: sf.write(f, np.clip(wav, -1.0, 1.0), sr, subtype="PCM_16", format="WAV"))


def synthesize_requests(
    xtts: Xtts,
    tokenizer: AmharicTokenizer,
    requests: Sequence[tuple[str, int, str, Path]],
    out_dir: Path,
    *,
    language: str,
    temperature: float,
    seed: int = 0,
    max_new_tokens: Optional[int] = None,
    seconds_per_char_range: Optional[tuple[float, float]] = None,
) -> list[SampleResult]:
    """Synthesise ``(name, index, text, reference_wav)`` requests to ``out_dir/<name>.wav``.

    Each sample is generated from ``seed`` (its own generator), so the same request at two
    checkpoints differs only by the weights. The GPT decodes all requests together
    (:func:`xtts_ft.inference.batch_decode.decode_all`, at most ``EVAL_BATCH`` rows at once): each
    sample gets the codes ``Xtts.inference`` gives it alone; HiFiGAN then vocodes several samples at once
    on a CPU (:func:`xtts_ft.inference.vocoding.vocode_all`). ``synthesis_s`` is its share of the batch's
    decoding plus its own vocoding.
    """
    check_language(tokenizer, language)
    for wav in dict.fromkeys(Path(r[3]) for r in requests):
        check_reference(wav)
    limit = int(xtts.args.gpt_max_text_tokens)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sr = int(xtts.args.output_sample_rate)
    previous_tokenizer = xtts.tokenizer
    xtts.tokenizer = tokenizer
    latents: dict[Path, Latents] = {}
    results: list[SampleResult] = []
    code_language = language.split("-")[0]  # what Xtts.inference encodes with
    try:
        with gpt_ready_for_inference(xtts, max_new_tokens), torch.random.fork_rng(devices=_rng_devices(xtts)), \
                stop_checks(xtts), torch.no_grad():
            decodes = []
            for _name, index, text, wav in requests:
                raise_if_stopped("sample synthesis")
                sent = text.strip().lower()  # what Xtts.inference does before encoding
                tokens = tokenizer.encode(sent, lang=code_language)
                if len(tokens) >= limit:
                    raise DataError(
                        f"sentence {index} ('{text[:40]}...') has {len(tokens)} tokens; the model takes fewer than "
                        f"{limit}: split it"
                    )
                wav = Path(wav)
                if wav not in latents:
                    latents[wav] = conditioning(xtts, wav)
                gpt_cond_latent = latents[wav][0].to(xtts.device)
                text_tokens = torch.IntTensor(tokens).unsqueeze(0).to(xtts.device)
                decodes.append(DecodeRequest(prefix_embeddings(xtts.gpt, gpt_cond_latent, text_tokens),
                                             int(xtts.gpt.max_gen_mel_tokens), Sampling(temperature=temperature), seed))
            start = time.perf_counter()
            # coqui's way on any device (no serve settings): fp32, eager steps, one at a time
            decoder = decoder_settings(next(xtts.parameters()).device).decoder(xtts.gpt, EVAL_BATCH)
            decode_all(xtts.gpt, decodes, max_batch=EVAL_BATCH, decoder=decoder)  # every sample's GPT in one batch
            _synchronize(xtts)
            decode_share = (time.perf_counter() - start) / max(1, len(decodes))
            # HiFiGAN: on a CPU several samples at once, one intra-op thread each (inference/vocoding.py)
            vocoded = vocode_all(xtts.hifigan_decoder, [(decoded.latents, latents[Path(wav)][1].to(xtts.device))
                                                        for (_n, _i, _t, wav), decoded in zip(requests, decodes)])
            _synchronize(xtts)
            for (name, index, text, wav), decoded, (audio, vocode_s) in zip(requests, decodes, vocoded):
                wav = Path(wav)
                elapsed = decode_share + vocode_s
                path = out_dir / f"{name}.wav"
                _write_wav(path, audio, sr)
                duration = audio.size / sr
                normalized = tokenizer.preprocess_text(text.strip().lower(), language)
                spc = seconds_per_char(duration, normalized)
                results.append(
                    SampleResult(
                        name=name, speaker=wav.stem, index=index, text=text, normalized_text=normalized,
                        path=path, reference_wav=wav, sample_rate=sr, n_codes=len(decoded.codes),
                        max_codes=int(xtts.gpt.max_gen_mel_tokens), ended_with_stop=decoded.ended_with_stop,
                        duration_s=duration, seconds_per_char=spc,
                        seconds_per_char_in_range=in_range(spc, seconds_per_char_range),
                        silence_ratio=silence_ratio(audio, sr), synthesis_s=elapsed,
                        rtf=elapsed / duration if duration > 0 else float("inf"),
                    )
                )
                log.debug("%s: %.2f s, %d codes, stop=%s", path.name, duration, len(decoded.codes),
                          decoded.ended_with_stop)
    finally:
        xtts.tokenizer = previous_tokenizer
    return results


def speaker_names(speaker_wavs: Sequence[Path]) -> list[str]:
    """File stems, made unique (``a``, ``a-2``) so two references never overwrite each other's samples."""
    seen: dict[str, int] = {}
    names = []
    for wav in speaker_wavs:
        stem = Path(wav).stem
        seen[stem] = seen.get(stem, 0) + 1
        names.append(stem if seen[stem] == 1 else f"{stem}-{seen[stem]}")
    return names


def synthesize_samples(
    xtts: Xtts,
    tokenizer: AmharicTokenizer,
    sentences: list[str],
    speaker_wavs: list[Path],
    out_dir: Path,
    *,
    language: str,
    temperature: float,
    seed: int = 0,
    max_new_tokens: Optional[int] = None,
    seconds_per_char_range: Optional[tuple[float, float]] = None,
) -> list[SampleResult]:
    """Every sentence in every voice, to ``out_dir/<speaker>_<i>.wav`` at the output rate (24 kHz)."""
    return synthesize_requests(
        xtts, tokenizer, sample_requests(sentences, speaker_wavs), out_dir, language=language, temperature=temperature,
        seed=seed, max_new_tokens=max_new_tokens, seconds_per_char_range=seconds_per_char_range,
    )


def sample_requests(sentences: Sequence[str], speaker_wavs: Sequence[Path]) -> list[tuple[str, int, str, Path]]:
    """The ``(name, index, text, reference_wav)`` requests of every sentence in every voice."""
    return [
        (f"{speaker}_{i}", i, sentence, Path(wav))
        for speaker, wav in zip(speaker_names(speaker_wavs), speaker_wavs)
        for i, sentence in enumerate(sentences)
    ]

