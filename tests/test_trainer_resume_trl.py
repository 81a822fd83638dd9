"""StreamResumeCallback under TRL's SFTTrainer on chat JSON Lines: TRL's own tokenizing (and packing) over the stream,
stopped and resumed, trains on what the run uninterrupted trained on; unpacked, no row of the finished steps is read
again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from datasets import load_dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

import air_hf

trl = pytest.importorskip("trl", reason="TRL is in the dev extra")

ROWS = 64
TEMPLATE = "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"


def write_conversations(folder: Path) -> None:
    """8 JSON Lines files of conversations; conversation k's user turn names it: "row{k}"."""
    folder.mkdir(parents=True)
    for f in range(8):
        with open(folder / f"part{f}.jsonl", "w") as out:
            for k in range(f * ROWS // 8, (f + 1) * ROWS // 8):
                messages = [{"role": "user", "content": f"row{k}"}, {"role": "assistant", "content": "hello"}]
                out.write(json.dumps({"messages": messages}) + "\n")


def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"[PAD]": 0, "[EOS]": 1, "[UNK]": 2, "user": 3, "assistant": 4, "hello": 5,
             **{f"row{k}": 6 + k for k in range(ROWS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]", unk_token="[UNK]",
                                   chat_template=TEMPLATE)


class Logged:
    """A map that passes rows through and appends each one's conversation to `log` (TRL tokenizes after it)."""

    def __init__(self, log: Path) -> None:
        self.log = str(log)

    def __call__(self, row: dict) -> dict:
        with open(self.log, "a") as f:
            f.write(row["messages"][0]["content"][3:] + "\n")
        return row


class Recording(trl.SFTTrainer):
    """Records the conversations of every micro-batch it trains on."""

    def training_step(self, model, inputs, num_items_in_batch=None):  # noqa: ANN001, ANN201 - Trainer's signature
        ids = inputs["input_ids"]
        self.seen.append(sorted((ids[(ids >= 6) & (ids < 6 + ROWS)] - 6).tolist()))
        return super().training_step(model, inputs, num_items_in_batch)


def sft(volume, out: Path, steps: int, *, packing: bool, resume: bool = False) -> list[list[int]]:  # noqa: ANN001
    ds = load_dataset("uc-volume", data_dir=volume.path("chat"), split="train", streaming=True, num_workers=4,
                      cache_dir=str(out.parent / "hf")).map(Logged(out.parent / "read.log"))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=ROWS + 6, n_positions=32, n_embd=8, n_layer=1, n_head=2))
    args = trl.SFTConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=2, max_length=16,
                         packing=packing, save_strategy="steps", save_steps=steps if resume else 3, report_to=[],
                         logging_strategy="no", disable_tqdm=True, use_cpu=True)
    trainer = Recording(model=model, args=args, train_dataset=ds, processing_class=tokenizer(),
                        callbacks=[air_hf.StreamResumeCallback()])
    trainer.seen = []
    (out.parent / "read.log").write_text("")
    trainer.train(resume_from_checkpoint=resume or None)
    return trainer.seen


@pytest.mark.parametrize("packing", [False, True], ids=["unpacked", "packed"])
def test_sft_resumed_trains_on_what_it_would_have_next(volume, tmp_path, packing):
    write_conversations(volume.local("chat"))
    full = sft(volume, tmp_path / "full", 9, packing=packing)
    first = sft(volume, tmp_path / "stopped", 6, packing=packing)
    second = sft(volume, tmp_path / "stopped", 9, packing=packing, resume=True)
    assert first + second == full
    if not packing:  # packing re-reads the rows of its batched map's batch up to the position (1,000 by default)
        read = {int(k) for k in (tmp_path / "read.log").read_text().split()}
        assert not read & {row for batch in first for row in batch}
