"""A Trainer resumed at step N of a uc-volume chat stream: what it reads again, and its time to the first step.

Data: `--records` chat JSON Lines records (`{"id", "messages": [user, assistant]}`, about 300 bytes each) in
16 files under the emulated volume (NETVOL_OPEN_MS=10, NETVOL_MBPS=200, a trace of the bytes each process
reads). The model is a tiny GPT-2 built from a config (random weights), its tokenizer a word-level one from
`tokenizers` over the records' words; nothing is downloaded. `load_dataset("uc-volume", ..., streaming=True)`,
a `.map` that tokenizes, `transformers.Trainer` with batch 8, one process, no DataLoader workers.

Each measurement is a process of its own, the node cache empty at its start (a preempted run restarted on
another machine):

- train: `--steps` steps with `air_hf.StreamResumeCallback`, a checkpoint at the last; it notes the rows of
  those steps (the finished steps' rows);
- fresh: `train()` from scratch with the callback, stopped after its first step;
- callback: `train(resume_from_checkpoint=<checkpoint of step N>)` with the callback, stopped after step N+1;
- default: the same resume without the callback: the Trainer's own skipping (accelerate's
  `skip_first_batches` reads and drops the batches of the finished steps).

For each: seconds from the `train()` call to the end of the first step it trains (a TrainerCallback's
`on_step_end`), the rows that reached the map and the collator by then and how many of them are rows of the
finished steps, and the bytes read from the volume by then (setup, `load_dataset`, apart). fresh, callback and
default take turns `--rounds` times; the summary takes medians (the ratio: the median of the rounds' ratios).
Targets: no row of the finished steps reaches the map or the collator on a resume with the callback, and its
time to the first step is within 1.2x a fresh start's.

    python benchmarks/bench_resume.py [--root /tmp/air-bench-resume] [--records 200000] [--steps 5000]
                                      [--rounds 3] [--keep]

Full size takes a few minutes on 2 cores (the training run most of it); a quick check that it runs:
--records 20000 --steps 500 --rounds 1. The data is written under --root and removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from ranks import cleanup, emit, fresh, prepare, result, trace_bytes, traced

VOLUME = "/Volumes/bench/ml/raw"
FILES = 16
BATCH = 8
WORDS = [f"w{k}" for k in range(512)]
SYSTEMS = ("fresh", "callback", "default")


# -- the data and the model ---------------------------------------------------------------------

def build_data(local: str, records: int) -> dict:
    """`local/chat/partNN.jsonl`: `records` chat records over `FILES` files, ids 0..records-1 (kept if there)."""
    import numpy as np

    folder = Path(local, "chat")
    marker = folder / f".records-{records}"
    if not marker.exists():
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        rng = np.random.default_rng(0)
        per_file = -(-records // FILES)
        for f in range(FILES):
            with open(folder / f"part{f:02d}.jsonl", "w") as out:
                for k in range(f * per_file, min(records, (f + 1) * per_file)):
                    user, assistant = (" ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n))
                                       for n in rng.integers(8, 40, 2))
                    out.write(json.dumps({"id": k, "messages": [{"role": "user", "content": user},
                                                                {"role": "assistant", "content": assistant}]}) + "\n")
        marker.write_text("")
    files = sorted(folder.glob("*.jsonl"))
    return {"rows": records, "files": len(files), "bytes": sum(p.stat().st_size for p in files)}


class Counts:
    """What reached the map and the collator, in all and of the finished steps' rows."""

    def __init__(self, finished: set[int]) -> None:
        self.finished = finished
        self.mapped = self.mapped_finished = self.collated = self.collated_finished = 0
        self.batches: list[list[int]] = []

    def snapshot(self) -> dict:
        return {"mapped_rows": self.mapped, "mapped_finished_rows": self.mapped_finished,
                "collated_rows": self.collated, "collated_finished_rows": self.collated_finished}


def tokenizer():  # noqa: ANN201 - a tokenizers.Tokenizer, imported in the measurement's process
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1, "user": 2, "assistant": 3, **{w: 4 + k for k, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.enable_truncation(64)
    return tok


# -- one measurement's process ---------------------------------------------------------------------

def measure_run(args) -> dict:
    """`args.run`: "train" (to step N, noting the finished rows), or "first" (the first step of `args.system`)."""
    import torch
    from datasets import load_dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    import air_hf

    finished_file = Path(args.root, "finished-ids.json")
    counts = Counts(set(json.loads(finished_file.read_text())) if args.run == "first" else set())
    tok = tokenizer()

    def tokenize(row: dict) -> dict:
        counts.mapped += 1
        counts.mapped_finished += row["id"] in counts.finished
        text = " ".join(f"{m['role']} {m['content']}" for m in row["messages"])
        return {"input_ids": tok.encode(text).ids}

    def collate(rows: list[dict]) -> dict:
        ids = [r["id"] for r in rows]
        counts.collated += len(ids)
        counts.collated_finished += sum(i in counts.finished for i in ids)
        counts.batches.append(ids)
        longest = max(len(r["input_ids"]) for r in rows)
        input_ids = torch.tensor([r["input_ids"] + [0] * (longest - len(r["input_ids"])) for r in rows])
        mask = (torch.arange(longest)[None, :] < torch.tensor([len(r["input_ids"]) for r in rows])[:, None]).long()
        return {"input_ids": input_ids, "attention_mask": mask, "labels": input_ids.masked_fill(mask == 0, -100)}

    class FirstStep(TrainerCallback):
        """Notes the time, the counts and the volume's bytes at the end of the first step trained; stops there."""

        def __init__(self) -> None:
            self.seen: dict | None = None

        def on_step_end(self, targs, state, control, **kwargs):  # noqa: ANN001, ANN201 - TrainerCallback's
            if self.seen is None:
                self.seen = {"at": time.perf_counter(), "step": state.global_step, **counts.snapshot(),
                             "bytes": trace_bytes()[0]}
                control.should_training_stop = args.run == "first"
            return control

    t = time.perf_counter()
    ds = load_dataset("uc-volume", data_dir=f"{VOLUME}/chat", split="train", streaming=True, cache_dir=args.hf_cache)
    ds = ds.map(tokenize).remove_columns(["messages"])
    setup_s, setup_bytes = time.perf_counter() - t, trace_bytes()[0]
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(WORDS) + 4, n_positions=64, n_embd=32, n_layer=1, n_head=2))
    out_dir = Path(args.root, "run")
    targs = TrainingArguments(
        output_dir=str(out_dir), max_steps=args.steps + 1 if args.run == "first" else args.steps,
        per_device_train_batch_size=BATCH, save_strategy="steps" if args.run == "train" else "no",
        save_steps=args.steps, report_to=[], logging_strategy="no", disable_tqdm=True, use_cpu=True,
        remove_unused_columns=False, dataloader_num_workers=0)
    first = FirstStep()
    callbacks = [first] + ([] if args.system == "default" else [air_hf.StreamResumeCallback()])
    trainer = Trainer(model=model, args=targs, train_dataset=ds, data_collator=collate, callbacks=callbacks)
    resume = str(out_dir / f"checkpoint-{args.steps}") if args.system in ("callback", "default") else None
    t = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    total_s = time.perf_counter() - t
    seen = first.seen
    assert seen is not None, "no step was trained"
    out = {"system": args.system, "setup_s": round(setup_s, 3), "setup_bytes": setup_bytes,
           "first_step": seen["step"], "first_step_s": round(seen["at"] - t, 3),
           **{k: seen[k] for k in counts.snapshot()}, "first_step_bytes": seen["bytes"] - setup_bytes}
    if args.run == "train":
        out["train_s"] = round(total_s, 1)
        finished_file.write_text(json.dumps([i for batch in counts.batches[:args.steps] for i in batch]))
    return out


# -- the run -----------------------------------------------------------------------------------------

def child(args, run: str, system: str) -> dict:
    """One measurement in a process of its own, the node cache empty, with a trace of its own."""
    fresh(args)
    cmd = [sys.executable, __file__, "--root", args.root, "--records", str(args.records), "--steps", str(args.steps),
           "--run", run, "--system", system]
    return result(subprocess.Popen(cmd, env=traced(args, system), stdout=subprocess.PIPE, text=True))


def summary(args, info: dict, got: dict[str, list[dict]]) -> dict:
    """The run's line: each system's medians over the rounds, and the targets beside them."""
    def mid(system: str, key: str) -> float:
        return median(r[key] for r in got[system])

    ratios = [c["first_step_s"] / f["first_step_s"] for c, f in zip(got["callback"], got["fresh"])]
    ratio = round(median(ratios), 3)
    finished_read = max(r["mapped_finished_rows"] + r["collated_finished_rows"] for r in got["callback"])
    out = {"summary": "resume", "records": args.records, "steps": args.steps, "batch": BATCH,
           "finished_rows": args.steps * BATCH, "data_bytes": info["bytes"], "rounds": args.rounds}
    for system in SYSTEMS:
        out.update({f"{system}_first_step_s": mid(system, "first_step_s"),
                    f"{system}_mapped_rows": mid(system, "mapped_rows"),
                    f"{system}_first_step_bytes": mid(system, "first_step_bytes")})
        if system != "fresh":  # a fresh start's first rows are the finished steps' first rows
            out.update({f"{system}_mapped_finished_rows": mid(system, "mapped_finished_rows"),
                        f"{system}_collated_finished_rows": mid(system, "collated_finished_rows")})
    out.update({"callback_over_fresh": ratio, "callback_over_fresh_per_round": [round(r, 3) for r in ratios],
                "default_over_fresh": round(median(d["first_step_s"] / f["first_step_s"]
                                                   for d, f in zip(got["default"], got["fresh"])), 3),
                "callback_finished_rows_read": finished_read, "finished_rows_ok": finished_read == 0,
                "time_target_ratio": 1.2, "time_ok": ratio <= 1.2})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", default="/tmp/air-bench-resume", help="work folder (data, caches, traces, checkpoints)")
    p.add_argument("--records", type=int, default=200_000, help="chat records in the data")
    p.add_argument("--steps", type=int, default=5000, help="the step the run stops at and resumes from")
    p.add_argument("--rounds", type=int, default=3, help="turns of fresh, callback and default; medians are taken")
    p.add_argument("--keep", action="store_true", help="keep the data under --root for the next run")
    p.add_argument("--run", choices=["train", "first"], help=argparse.SUPPRESS)
    p.add_argument("--system", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.local = f"{args.root}/Volumes{VOLUME[len('/Volumes'):]}"
    args.cache, args.hf_cache = f"{args.root}/cache", f"{args.root}/hf"
    args.scale = args.records  # what `ranks.prepare` builds the data at
    if args.run:
        print(json.dumps(measure_run(args)))
        return
    if args.steps * BATCH >= args.records:
        raise SystemExit(f"--steps {args.steps} of batch {BATCH} read {args.steps * BATCH} rows: give more --records "
                         "than that, so the stop lies inside the first epoch")
    info = prepare(args, build_data)
    try:
        emit(child(args, "train", "train"))
        got: dict[str, list[dict]] = {s: [] for s in SYSTEMS}
        for k in range(args.rounds):
            for system in SYSTEMS:
                got[system].append(emit({**child(args, "first", system), "round": k}))
        emit(summary(args, info, got))
    finally:
        cleanup(args)
        shutil.rmtree(Path(args.root, "run"), ignore_errors=True)
        Path(args.root, "finished-ids.json").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
