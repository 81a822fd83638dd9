"""transformers.Trainer over a uc-volume chat stream with StreamResumeCallback: the run uninterrupted, stopped, resumed.

Imported by tests/test_trainer_resume.py for one process; run under torchrun for several:

    hf_trainer_resume.py DATA_DIR HF_CACHE OUT_DIR

Each rank writes OUT_DIR/rank{r}.json: the rows each micro-batch of the uninterrupted run, the stopped run and the
resumed run trained on, the rows the resumed run tokenized, and the errors of two resumes that must be refused.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from datasets import load_dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import air_hf
from air_core import StateError

ROWS = 160


def write_chat(folder: Path, files: int = 16, rows: int = ROWS) -> None:
    """`files` JSON Lines files holding `rows` records in all; record k's text names it: "row{k} hello"."""
    folder.mkdir(parents=True, exist_ok=True)
    per_file = rows // files
    for f in range(files):
        with open(folder / f"part{f}.jsonl", "w") as out:
            for k in range(f * per_file, (f + 1) * per_file):
                out.write(json.dumps({"text": f"row{k} hello"}) + "\n")


def tokenizer() -> Tokenizer:
    """A word-level tokenizer whose id for "row{k}" is 3 + k."""
    vocab = {"[PAD]": 0, "[UNK]": 1, "hello": 2, **{f"row{k}": 3 + k for k in range(ROWS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


class Tokenize:
    """The map over the stream: tokenizes a row and appends its number to `log` (DataLoader workers too)."""

    def __init__(self, log: Path) -> None:
        self.tok, self.log = tokenizer(), str(log)

    def __call__(self, row: dict) -> dict:
        ids = self.tok.encode(row["text"]).ids
        with open(self.log, "a") as f:
            f.write(f"{ids[0] - 3}\n")
        return {"input_ids": ids}


def collate(rows: list[dict]) -> dict:
    ids = torch.tensor([r["input_ids"] for r in rows])
    return {"input_ids": ids, "labels": ids}


class Recording(Trainer):
    """Records the rows of every micro-batch it trains on."""

    def training_step(self, model, inputs, num_items_in_batch=None):  # noqa: ANN001, ANN201 - Trainer's signature
        self.seen.append((inputs["input_ids"][:, 0] - 3).tolist())
        return super().training_step(model, inputs, num_items_in_batch)


def train(data_dir: str, out: Path, steps: int, *, hf_cache: Path, log: Path, resume: bool = False,
          workers: int = 0, accumulation: int = 1, save_steps: int = 2, dispatch: bool | None = None,
          stream: dict[str, Any] | None = None, callback: bool = True, filtered: bool = False) -> list[list[int]]:
    """Train a tiny GPT-2 for `steps` steps (resumed from the last checkpoint in `out`) on the chat rows of
    `data_dir`, tokenized as they stream; the rows of each micro-batch, in order. `log` gets the rows tokenized.
    `stream`: load_dataset options beside data_dir (default: 4 shards a process); `dispatch`: accelerate's
    dispatch_batches, when given; `filtered`: a filter keeping every row after the map (another pipeline)."""
    options = {"num_workers": 4, **(stream or {})}
    ds = load_dataset("uc-volume", data_dir=data_dir, split="train", streaming=True, cache_dir=str(hf_cache), **options)
    ds = ds.map(Tokenize(log)).remove_columns(["text"])
    if filtered:
        ds = ds.filter(bool)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=ROWS + 3, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    args = TrainingArguments(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=4, gradient_accumulation_steps=accumulation,
        dataloader_num_workers=workers, save_strategy="steps", save_steps=save_steps, report_to=[],
        logging_strategy="no", disable_tqdm=True, use_cpu=True, remove_unused_columns=False,
        ddp_backend="gloo" if "RANK" in os.environ else None,
        accelerator_config={} if dispatch is None else {"dispatch_batches": dispatch},
    )
    trainer = Recording(model=model, args=args, train_dataset=ds, data_collator=collate,
                        callbacks=[air_hf.StreamResumeCallback()] if callback else [])
    trainer.seen = []
    log.write_text("")
    trainer.train(resume_from_checkpoint=resume or None)
    return trainer.seen


def logged(log: Path) -> list[int]:
    """The rows `log` says were tokenized."""
    return [int(line) for line in log.read_text().split()]


def refused(run) -> str:  # noqa: ANN001 - a function of no arguments
    """The StateError `run()` raises."""
    try:
        run()
    except StateError as e:
        return str(e)
    raise AssertionError("the resume was not refused")


def main() -> None:
    data_dir, hf_cache, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    rank = int(os.environ["RANK"])
    log = out / f"tokenized{rank}.log"
    # 8 shards a process, which set_epoch(1) reorders (a permutation of 4 seeded with 1 is the identity).
    common = dict(hf_cache=hf_cache, log=log, workers=1, dispatch=False, stream={"num_workers": 8})
    # 160 rows: 20 batches of 4 a process an epoch. Stopped at step 24 of 30: in epoch 2.
    full = train(data_dir, out / "full", 30, **common)
    first = train(data_dir, out / "stopped", 24, **common)
    second = train(data_dir, out / "stopped", 30, resume=True, **common)
    tokenized = logged(log)
    # A copy of the checkpoint with rank 1's position gone; then the default dispatch, refused on several processes.
    some = out / "some"
    if rank == 0:
        shutil.copytree(out / "stopped" / "checkpoint-24", some / "checkpoint-24")
        (some / "checkpoint-24" / "stream_positions" / "rank-1.json").unlink()
    torch.distributed.barrier()
    partial = refused(lambda: train(data_dir, some, 30, resume=True, **common))
    dispatched = refused(lambda: train(data_dir, out / "dispatched", 2, **{**common, "dispatch": None}))
    (out / f"rank{rank}.json").write_text(json.dumps(
        {"full": full, "first": first, "second": second, "tokenized": tokenized, "partial": partial,
         "dispatched": dispatched}))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
