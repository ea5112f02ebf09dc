"""training.trainable: freeze keeps its tensors bit-identical; lora trains, resumes exactly, and exports to stock coqui."""

from __future__ import annotations

import copy
import dataclasses
import re

import pytest
import torch

from tests.train.trainhelpers import small_config, train_lines
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.errors import CheckpointError, ConfigError
from xtts_ft.evaluate.export import export_from_checkpoint
from xtts_ft.train.stability import gpt_state_dict
from xtts_ft.train.trainable import apply_trainable, check_resume_trainable, merge_adapters, merged_gpt_state

ROWS = ("text_embedding.weight", "text_head.weight", "text_head.bias")
STEPS = 6


def _losses(run) -> dict[int, tuple]:
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in train_lines(run)}


def _final_gpt(result) -> dict[str, torch.Tensor]:
    return CheckpointStore.load_state(result.last_checkpoint).gpt


def _trainable_counts(caplog) -> list[int]:
    """The trainable-weight counts the run logged: apply_trainable's, then the pre-flight's."""
    found = []
    for record in caplog.records:
        line = record.getMessage()
        m = re.match(r"training\.trainable \w+: ([\d,]+) weights train", line) or \
            re.match(r"parameters: ([\d,]+) trainable \(xtts\.gpt\)", line)
        if m:
            found.append(int(m.group(1).replace(",", "")))
    return found


def _weights_that_train(gpt_state: dict, n_base: int, tcfg) -> int:
    """Counted from the model itself: every weight of a tensor that trains, less the base rows that stay (freeze:
    the text embedding's and the text head's; lora: the text embedding's, its heads train whole)."""
    kept = ROWS if tcfg["trainable"] == "freeze" else ROWS[:1]
    total = sum(t.numel() for k, t in gpt_state.items() if _trains(k, tcfg))
    return total - sum(gpt_state[k][:n_base].numel() for k in kept if _trains(k, tcfg))


def _trains(key: str, tcfg) -> bool:
    if tcfg["trainable"] == "freeze":
        return not any(key.startswith(f"gpt.h.{i}.") for i in range(tcfg["frozen_blocks"]))
    return ".lora_" in key or key.split(".")[0] in ("text_embedding", "text_head", "mel_head")


def test_freeze_leaves_frozen_blocks_and_base_rows_bit_identical(trainer, built_model, vocab, tmp_path, caplog):
    base = gpt_state_dict(built_model.xtts.gpt)
    n_base = vocab[1]
    # lr 1e-3 with weight decay on text_head.weight: without the row keeper its base rows would move
    training = {"trainable": "freeze", "frozen_blocks": 1, "max_steps": 3, "weight_decay": 0.1}
    with caplog.at_level("INFO", logger="xtts_ft"):
        result = trainer(small_config(tmp_path / "run", training=training))
    # one count of the weights that train, wherever it is printed: the base rows kept by KeptRows are not in it
    assert _trainable_counts(caplog) == [_weights_that_train(base, n_base, training)] * 2
    after = _final_gpt(result)
    assert set(after) == set(base)
    block0 = [k for k in base if k.startswith("gpt.h.0.")]
    assert block0 and all(torch.equal(after[k], base[k]) for k in block0)
    for key in ROWS:
        assert torch.equal(after[key][:n_base], base[key][:n_base]), key
    assert not torch.equal(after["text_embedding.weight"][n_base:], base["text_embedding.weight"][n_base:])
    assert not torch.equal(after["text_head.weight"][n_base:], base["text_head.weight"][n_base:])
    assert any(not torch.equal(after[k], base[k]) for k in base if k.startswith("gpt.h.1."))  # the rest trains


def test_freeze_more_blocks_than_the_gpt_has_names_the_key(built_model):
    tcfg = dataclasses.replace(small_config(".").training, trainable="freeze", frozen_blocks=99)
    with pytest.raises(ConfigError, match="training.frozen_blocks: 99 is more than the GPT's 2 blocks"):
        apply_trainable(copy.deepcopy(built_model).xtts.gpt, tcfg, 10)


def _gpt_outputs(gpt, n_tokens: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    text = torch.randint(3, n_tokens, (2, 9), generator=gen)
    codes = torch.randint(0, 256, (2, 12), generator=gen)
    cond = torch.randn(2, 1, 80, 64, generator=gen)
    gpt.eval()
    with torch.no_grad():
        _, _, mel_logits = gpt(text, torch.tensor([9, 7]), codes, torch.tensor([12 * 1024, 9 * 1024]), cond_mels=cond)
    return mel_logits


def test_lora_trains_resumes_exactly_and_exports_to_stock_coqui(trainer, built_model, vocab, tiny_base, tmp_path,
                                                                 caplog):
    lora = {"trainable": "lora", "lora_rank": 4, "lora_alpha": 8.0, "max_steps": STEPS}
    base = gpt_state_dict(built_model.xtts.gpt)

    straight_run = tmp_path / "straight"
    with caplog.at_level("INFO", logger="xtts_ft"):
        straight = trainer(small_config(straight_run, training=lora, evaluation={"eval_at_start": True}))
    counts = _trainable_counts(caplog)
    assert len(counts) == 2 and counts[0] == counts[1]  # apply_trainable's and the pre-flight's: one count
    assert counts[0] == _weights_that_train(_final_gpt(straight), vocab[1], lora)
    assert straight.final_eval_loss < straight.first_eval_loss  # it learns
    state = _final_gpt(straight)
    adapters_b = [k for k in state if ".lora_B." in k]
    assert len(adapters_b) == 8 and all(state[k].abs().sum() > 0 for k in adapters_b)  # B starts at zero
    for key in (k for k in state if ".base_layer." in k):  # the adapted weights themselves stay frozen
        assert torch.equal(state[key], base[key.replace(".base_layer.", ".")]), key
    assert torch.equal(state["text_embedding.weight"][: vocab[1]], base["text_embedding.weight"][: vocab[1]])
    assert not torch.equal(state["mel_head.weight"], base["mel_head.weight"])  # heads train whole

    split_run = tmp_path / "split"
    cfg = small_config(split_run, training=lora, checkpoint={"every_steps": 100})
    trainer(cfg, max_steps_override=STEPS // 2)
    torch.manual_seed(999)  # only the checkpoint's RNG states can make the rest identical
    resumed = trainer(cfg)
    expected = {s: v for s, v in _losses(straight_run).items()}
    assert _losses(split_run) == expected  # bit-identical per-step losses and grad norms on CPU
    final = _final_gpt(resumed)
    assert all(torch.equal(final[k], state[k]) for k in state)
    with pytest.raises(CheckpointError, match="trained with training.trainable: lora, the config says all"):
        trainer(small_config(split_run, training={"max_steps": STEPS + 2}))

    # export: adapters merged into plain weights; stock coqui loads it unchanged
    out = export_from_checkpoint(resumed.last_checkpoint, tmp_path / "export", tiny_base)
    from TTS.tts.configs.xtts_config import XttsConfig
    from TTS.tts.models.xtts import Xtts

    config = XttsConfig()
    config.load_json(str(out / "config.json"))
    stock = Xtts.init_from_config(config)
    stock.load_checkpoint(config, checkpoint_dir=str(out), eval=True)

    model = copy.deepcopy(built_model)
    apply_trainable(model.xtts.gpt, cfg.training, vocab[1])
    model.xtts.gpt.load_state_dict(final, strict=True)
    n_tokens = final["text_embedding.weight"].shape[0]
    unmerged = _gpt_outputs(model.xtts.gpt, n_tokens)
    assert merge_adapters(model.xtts.gpt) == 8
    merged = gpt_state_dict(model.xtts.gpt)
    from_state = merged_gpt_state(final, dataclasses.asdict(cfg.training))
    assert set(merged) == set(from_state) and all(torch.equal(merged[k], from_state[k]) for k in merged)
    stock_state = gpt_state_dict(stock.gpt)
    assert all(torch.equal(stock_state[k], merged[k]) for k in merged)
    same = _gpt_outputs(stock.gpt, n_tokens)
    assert torch.equal(same, _gpt_outputs(model.xtts.gpt, n_tokens))
    torch.testing.assert_close(same, unmerged, rtol=1e-4, atol=1e-5)  # merging changes only rounding


def test_a_resume_with_another_trainable_option_is_refused_naming_the_key(tmp_path):
    tcfg = small_config(tmp_path).training
    lora = dataclasses.replace(tcfg, trainable="lora")
    check_resume_trainable(dataclasses.asdict(lora), lora, tmp_path)  # the same: accepted
    check_resume_trainable({"lr": 1e-3}, tcfg, tmp_path)  # written before the option: it trained everything
    with pytest.raises(CheckpointError, match="trained with training.trainable: lora, the config says all"):
        check_resume_trainable(dataclasses.asdict(lora), tcfg, tmp_path)
    with pytest.raises(CheckpointError, match="training.lora_rank: 16, the config says 8"):
        check_resume_trainable(dataclasses.asdict(lora), dataclasses.replace(lora, lora_rank=8), tmp_path)


def test_config_checks_name_the_trainable_keys():
    problems: list[str] = []
    dataclasses.replace(small_config(".").training, lora_targets=["q_proj"], lora_rank=0, frozen_blocks=-1).check(problems)
    text = "\n".join(problems)
    assert "training.lora_targets: ['q_proj']" in text and "unknown: ['q_proj']" in text
    assert "training.lora_rank must be >= 1" in text and "training.frozen_blocks: must be >= 0" in text
