import json
import re
import shutil

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml
from evalhelpers import MAX_NEW_TOKENS, identity

from xtts_ft.errors import CheckpointError, ModelError, TokenizerError
from xtts_ft.evaluate.export import EXPORT_META, export_from_checkpoint, export_model
from xtts_ft.evaluate.infer import synthesize_command
from xtts_ft.evaluate.readme import TOKENIZER_IMPORT
from xtts_ft.layout import OUTPUT_MARKER
from xtts_ft.model import base_state_dict, describe_vocab
from xtts_ft.output_folder import OutputFolderError
from xtts_ft.text_settings import TextSettings
from xtts_ft.tokenizer.fingerprint import vocab_fingerprint

INFERENCE_KEYS = ("gpt_inference.", "gpt.wte.")
TEXT = TextSettings(fold_homophones=False, char_limit=200)


def _gpt_weights(state: dict, prefix: str = "") -> dict:
    return {k[len(prefix):]: v for k, v in state.items()
            if k.startswith(prefix) and not k[len(prefix):].startswith(INFERENCE_KEYS)}


def _assert_same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.fixture(scope="module")
def export_dir(tiny_base, am_vocab, trained_gpt_state, tmp_path_factory):
    out = tmp_path_factory.mktemp("exports") / "amharic"
    return export_model(base=tiny_base, vocab_path=am_vocab, gpt_state_dict=trained_gpt_state, out_dir=out,
                        text=TEXT, extra_meta={"step": 2, "source_checkpoint": "in-memory test model"})


def _checkpoint(tmp_path, am_vocab, gpt_state, *, prefix="", fingerprint=None, extra=None):
    ckpt = tmp_path / "checkpoints" / "step_000002"
    ckpt.mkdir(parents=True)
    state = {"model": {prefix + k: v for k, v in gpt_state.items()}, "optimizer": {"state": {}, "param_groups": []},
             "step": 2, **(extra or {})}
    torch.save(state, ckpt / "training_state.pt")
    shutil.copyfile(am_vocab, ckpt / "vocab.json")
    meta = {"step": 2, "vocab_fingerprint": fingerprint or vocab_fingerprint(am_vocab)}
    (ckpt / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    cfg = {"run": {"language": "am"}, "text": {"fold_homophones": True}, "tokenizer": {"char_limit": 180}}
    (ckpt / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return ckpt


def test_export_folder_contents(export_dir, tiny_base, am_vocab, trained_gpt_state):
    names = sorted(p.name for p in export_dir.iterdir())
    assert names == sorted(["model.pth", "config.json", "vocab.json", "mel_stats.pth", "dvae.pth", EXPORT_META, "README.md",
                            OUTPUT_MARKER])  # the marker: export wrote this folder (xtts_ft/output_folder.py)
    assert not [p for p in export_dir.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left
    ckpt = torch.load(export_dir / "model.pth", map_location="cpu", weights_only=True)
    assert list(ckpt) == ["model"]
    state = ckpt["model"]
    assert not [k for k in state if k.startswith(("dvae.", "torch_mel", "gpt.gpt_inference", "gpt.gpt.wte"))]
    n = describe_vocab(am_vocab)
    assert state["gpt.text_embedding.weight"].shape[0] == state["gpt.text_head.weight"].shape[0] == n
    _assert_same(_gpt_weights(state, "gpt."), _gpt_weights(trained_gpt_state))
    base = base_state_dict(tiny_base.model_pth)
    assert torch.equal(state["hifigan_decoder.waveform_decoder.conv_pre.weight"],
                       base["hifigan_decoder.waveform_decoder.conv_pre.weight"])
    config = json.loads((export_dir / "config.json").read_text(encoding="utf-8"))
    assert config["languages"][-1] == "am" and "en" in config["languages"]
    assert config["model_args"]["gpt_number_text_tokens"] == n and config["model_args"]["tokenizer_file"] == ""
    meta = json.loads((export_dir / EXPORT_META).read_text(encoding="utf-8"))
    assert meta["vocab_fingerprint"] == vocab_fingerprint(am_vocab) and meta["step"] == 2 and meta["language"] == "am"


def test_stock_coqui_loads_the_export_and_the_readme_lines_synthesise(export_dir, trained_gpt_state, speaker_wav):
    from TTS.tts.configs.xtts_config import XttsConfig
    from TTS.tts.models.xtts import Xtts

    config = XttsConfig()
    config.load_json(str(export_dir / "config.json"))
    model = Xtts.init_from_config(config)
    model.load_checkpoint(config, checkpoint_dir=str(export_dir), eval=True)
    _assert_same(_gpt_weights(model.gpt.state_dict()), _gpt_weights(trained_gpt_state))

    # the project contributes only its tokenizer: run the README's own lines
    readme = (export_dir / "README.md").read_text(encoding="utf-8")
    block = re.findall(r"```python\n(.*?)```", readme, flags=re.S)[1]
    assert block.splitlines()[0] == TOKENIZER_IMPORT
    tokenizer_line = f"AmharicTokenizer({str(export_dir / 'vocab.json')!r}, fold_homophones=False, char_limit=200)"
    assert f"model.tokenizer = {tokenizer_line}" in block
    code = re.sub(r"AmharicTokenizer\((.*?)\)$", r"AmharicTokenizer(\1, normalizer=identity)", block, flags=re.M)
    code = re.sub(r"model\.synthesize\('[^']*'", "model.synthesize('the quick fox'", code)
    code = code.replace('speaker_wav="voice.wav"', f"speaker_wav={str(speaker_wav)!r}")
    code = code.replace("language='am')", f"language='am', max_new_tokens={MAX_NEW_TOKENS})")
    assert code.count("normalizer=identity") == 1 and "the quick fox" in code and "max_new_tokens" in code
    namespace = {"model": model, "identity": identity}
    exec(code, namespace)  # noqa: S102 - our own README
    wav = np.asarray(namespace["out"]["wav"])
    assert wav.size > 0 and np.isfinite(wav).all()
    assert type(model.tokenizer).__name__ == "AmharicTokenizer"


def test_export_from_checkpoint_accepts_both_key_styles(tmp_path, tiny_base, am_vocab, trained_gpt_state):
    exported = []
    for prefix in ("", "gpt."):
        root = tmp_path / (prefix or "relative")
        ckpt = _checkpoint(root, am_vocab, trained_gpt_state, prefix=prefix)
        out = export_from_checkpoint(ckpt, root / "export", tiny_base)
        exported.append(torch.load(out / "model.pth", map_location="cpu", weights_only=True)["model"])
        meta = json.loads((out / EXPORT_META).read_text(encoding="utf-8"))
        assert meta["step"] == 2 and meta["source_checkpoint"] == str(ckpt.resolve())
        assert meta["text"] == {"fold_homophones": True, "char_limit": 180}
        readme = (out / "README.md").read_text(encoding="utf-8")
        assert "fold_homophones=True, char_limit=180)" in readme
    _assert_same(exported[0], exported[1])
    _assert_same(_gpt_weights(exported[0], "gpt."), _gpt_weights(trained_gpt_state))


def test_export_refuses_mismatches(tmp_path, tiny_base, am_vocab, trained_gpt_state):
    with pytest.raises(TokenizerError, match="fingerprint"):
        export_from_checkpoint(_checkpoint(tmp_path / "a", am_vocab, trained_gpt_state, fingerprint="0" * 16),
                               tmp_path / "a" / "export", tiny_base)
    with pytest.raises(TokenizerError, match="text rows"):  # the base vocab lacks [am]: one row fewer
        export_model(base=tiny_base, vocab_path=tiny_base.vocab_json, gpt_state_dict=trained_gpt_state,
                     out_dir=tmp_path / "b", text=TEXT)
    with pytest.raises(CheckpointError, match="training_state.pt"):
        export_from_checkpoint(tmp_path, tmp_path / "c", tiny_base)
    with pytest.raises(CheckpointError, match="no GPT weights"):
        export_model(base=tiny_base, vocab_path=am_vocab, gpt_state_dict={"x.weight": torch.zeros(1)},
                     out_dir=tmp_path / "d", text=TEXT)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(OutputFolderError, match="1 file\\(s\\) not written by this tool: notes.txt"):
        export_model(base=tiny_base, vocab_path=am_vocab, gpt_state_dict=trained_gpt_state, out_dir=tmp_path / "taken",
                     text=TEXT)
    assert (tmp_path / "taken" / "notes.txt").is_file()


def test_checkpoint_that_would_run_code_is_refused(tmp_path, tiny_base, am_vocab, trained_gpt_state):
    ckpt = _checkpoint(tmp_path, am_vocab, trained_gpt_state, extra={"sneaky": re.compile("x")})
    with pytest.raises(CheckpointError, match="refused"):
        export_from_checkpoint(ckpt, tmp_path / "export", tiny_base)


def test_reexport_replaces_an_earlier_export(tmp_path, tiny_base, am_vocab, trained_gpt_state):
    out = tmp_path / "export"
    export_model(base=tiny_base, vocab_path=am_vocab, gpt_state_dict=trained_gpt_state, out_dir=out, text=TEXT,
                 extra_meta={"step": 1})
    export_model(base=tiny_base, vocab_path=am_vocab, gpt_state_dict=trained_gpt_state, out_dir=out, text=TEXT,
                 extra_meta={"step": 9})
    assert json.loads((out / EXPORT_META).read_text(encoding="utf-8"))["step"] == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_synthesize_command_from_export_and_from_checkpoint(tmp_path, export_dir, tiny_base, am_vocab,
                                                            trained_gpt_state, speaker_wav):
    kw = dict(normalizer=identity, max_new_tokens=MAX_NEW_TOKENS, device="cpu", temperature=0.7)
    a = synthesize_command(export_dir, "the quick fox", speaker_wav, tmp_path / "a.wav", **kw)
    ckpt = _checkpoint(tmp_path, am_vocab, trained_gpt_state)
    b = synthesize_command(ckpt, "the quick fox", speaker_wav, tmp_path / "b.wav", base=tiny_base, **kw)
    wa, sr = sf.read(str(a))
    wb, _ = sf.read(str(b))
    assert sr == 24000 and wa.size > 0 and np.isfinite(wa).all()
    np.testing.assert_allclose(wa, wb, atol=2e-3)  # same weights, same seed: the same audio
    with pytest.raises(CheckpointError, match="pass the base model"):
        synthesize_command(ckpt, "the fox", speaker_wav, tmp_path / "c.wav", **kw)
    with pytest.raises(ModelError, match="neither an export"):
        synthesize_command(tmp_path, "the fox", speaker_wav, tmp_path / "c.wav", **kw)
