"""StreamResumeCallback: a resumed Trainer trains on what the stopped run would have trained on next, and the rows of
the finished steps are not tokenized again; positions of another stream, grid or step are refused, naming what
differs; a checkpoint without positions falls back to the Trainer's own skipping, with a warning."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from conftest import torchrun
from datasets import Dataset
from scripts.hf_trainer_resume import collate, logged, refused, train, write_chat
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import air_hf
from air_core import StateError
from air_core.io.cache import Cache

SCRIPTS = Path(__file__).parent / "scripts"


class Chat:
    """A chat JSON Lines folder on the volume (160 rows in 16 files), trained on with `train`."""

    def __init__(self, volume, tmp_path: Path) -> None:  # noqa: ANN001 - the conftest fixture
        write_chat(volume.local("chat"))
        self.volume, self.tmp, self.log = volume, tmp_path, tmp_path / "tokenized.log"

    def train(self, out: str, steps: int, data: str = "chat", **options) -> list[list[int]]:
        return train(self.volume.path(data), self.tmp / out, steps, hf_cache=self.tmp / "hf", log=self.log, **options)

    def tokenized(self) -> list[int]:
        return logged(self.log)

    def fetched(self, data: str = "chat") -> set[int]:
        """The files of `data` (their numbers: partN.jsonl) whose copy is in the node cache."""
        cache = Cache()
        return {int(p.stem.removeprefix("part")) for p in self.volume.local(data).iterdir()
                if cache.lookup(self.volume.path(f"{data}/{p.name}"), p.stat().st_size, p.stat().st_mtime_ns)}


@pytest.fixture
def chat(volume, tmp_path) -> Chat:
    return Chat(volume, tmp_path)


def rows(batches: list[list[int]]) -> set[int]:
    return {row for batch in batches for row in batch}


def read_on(tokenized: list[int], trained: list[list[int]]) -> bool:
    """Whether a resumed run read (tokenized) first exactly the rows it trained on, in order (one worker or none)."""
    flat = [row for batch in trained for row in batch]
    return tokenized[:len(flat)] == flat


def stop_and_resume(chat: Chat, stop: int, steps: int, **options) -> None:
    """The run uninterrupted equals the run stopped at step `stop` (in the first epoch) then resumed, and the resume
    tokenizes no row of the finished steps, nor fetches a file all of whose rows they trained on."""
    full = chat.train("full", steps, save_steps=steps, **options)
    first = chat.train("stopped", stop, save_steps=stop, **options)
    Cache().clear()
    second = chat.train("stopped", steps, resume=True, save_steps=steps, **options)
    assert first + second == full
    assert not rows(first) & set(chat.tokenized())
    done = {f for f in range(16) if set(range(10 * f, 10 * f + 10)) <= rows(first)}  # write_chat: row k in file k // 10
    assert done and not done & chat.fetched()
    if options.get("workers", 0) == 0:
        assert read_on(chat.tokenized(), second)


@pytest.mark.parametrize("accumulation", [1, 2])
def test_a_resumed_run_trains_on_what_the_stopped_run_would_have_next(chat, accumulation):
    stop_and_resume(chat, 6, 12, accumulation=accumulation)


def test_each_process_reads_its_own_shards_through_accelerate_and_resumes_as_well(chat):
    stop_and_resume(chat, 6, 10, dispatch=False)


@pytest.mark.slow  # DataLoader workers
def test_batches_the_workers_read_ahead_are_not_counted_as_trained(chat):
    # 4 shards over 2 workers, gradient accumulation: the position saved is that of the last micro-batch trained on,
    # each worker's own, and the resumed run starts its round of workers at the one whose batch came next.
    stop_and_resume(chat, 7, 12, workers=2, accumulation=2)


@pytest.mark.parametrize("stop", [17, 16], ids=["inside", "at the end of the first"])
def test_a_shuffled_stream_resumes_in_the_epoch_it_stopped_in(chat, stop):
    # 64 rows in 8 shards: 16 batches of 4 an epoch. The Trainer counts epochs of a stream with no length from 0
    # again when it resumes; the stream reads on in its own.
    write_chat(chat.volume.local("short"), rows=64)
    options = {"data": "short", "stream": {"shuffle": True, "num_workers": 8}}
    full = chat.train("full", 20, save_steps=20, **options)
    assert full[16:] != full[:4]  # the second epoch is read in another order
    first = chat.train("stopped", stop, save_steps=stop, **options)
    second = chat.train("stopped", 20, resume=True, save_steps=20, **options)
    assert first + second == full
    assert read_on(chat.tokenized(), second)


@pytest.fixture
def stopped(chat) -> Chat:
    """A run stopped at step 4, a checkpoint every 2 steps, over a shuffled stream of 4 shards with seed 0."""
    chat.train("stopped", 4, stream={"shuffle": True})
    return chat


def another_folder(chat: Chat) -> dict:
    write_chat(chat.volume.local("copy"))
    return {"data": "copy"}


def a_file_added(chat: Chat) -> dict:
    chat.volume.write("chat/part9.jsonl", json.dumps({"text": "row0 hello"}) + "\n")
    return {}


def another_step(chat: Chat) -> dict:
    saved = chat.tmp / "stopped" / "checkpoint-4" / "stream_positions"
    shutil.rmtree(saved)
    shutil.copytree(chat.tmp / "stopped" / "checkpoint-2" / "stream_positions", saved)
    return {}


@pytest.mark.parametrize(("change", "said"), [
    (lambda chat: {"stream": {"shuffle": True, "seed": 1}}, "seed: 0 then, 1 now"),
    (lambda chat: {"stream": {"shuffle": False}}, "shuffle: True then, False now"),
    (lambda chat: {"stream": {"shuffle": True, "mode": "text"}}, "mode: 'auto' then, 'text' now"),
    (another_folder, "data_dir: '/Volumes/main/ml/raw/chat' then, '/Volumes/main/ml/raw/copy' now"),
    (a_file_added, "now (files were added, removed or changed in the folder)"),
    (lambda chat: {"stream": {"shuffle": True, "num_workers": 2}}, "shards: 4 then, 2 now"),
    (lambda chat: {"stream": {"shuffle": True}, "workers": 1},
     "saved by 1 process with dataloader_num_workers=0; this run has 1 process with dataloader_num_workers=1"),
    (lambda chat: {"stream": {"shuffle": True}, "filtered": True}, "now (other steps built on the data"),
    (another_step, "was saved at step 2, in a checkpoint of step 4"),
], ids=["seed", "shuffle", "mode", "folder", "listing", "shards", "workers", "pipeline", "step"])
def test_a_position_of_another_stream_grid_or_step_is_refused_naming_what_differs(stopped, change, said):
    options = {"stream": {"shuffle": True}, **change(stopped)}
    error = refused(lambda: stopped.train("stopped", 6, resume=True, **options))
    assert said in error
    assert not stopped.tokenized()  # refused before any row was read


def test_a_checkpoint_without_positions_falls_back_to_the_trainers_skipping_with_a_warning(chat, caplog):
    full = chat.train("full", 6)
    first = chat.train("stopped", 4, callback=False)
    with caplog.at_level(logging.WARNING, logger="air_hf"):
        second = chat.train("stopped", 6, resume=True)
    assert first + second == full
    assert "holds no stream position" in caplog.text and "reads and drops the 4 batches (16 rows)" in caplog.text
    assert rows(first) <= set(chat.tokenized())  # what the warning said it costs
    assert (chat.tmp / "stopped" / "checkpoint-6" / "stream_positions" / "rank-0.json").exists()


def test_a_dataset_with_a_length_is_left_to_the_trainer(tmp_path):
    ds = Dataset.from_dict({"input_ids": [[3, 2]] * 8})
    model = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=2, report_to=[], use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=collate,
                      callbacks=[air_hf.StreamResumeCallback()])
    with pytest.raises(StateError, match="resumed by the Trainer itself, without reading it: leave the callback out"):
        trainer.train()


@pytest.mark.slow  # torchrun
def test_two_ranks_each_resume_their_own_position(volume, tmp_path):
    write_chat(volume.local("chat"))
    out = tmp_path / "out"
    out.mkdir()
    torchrun(SCRIPTS / "hf_trainer_resume.py", 2, volume.path("chat"), str(tmp_path / "hf"), str(out))
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        assert r["first"] + r["second"] == r["full"]
        assert read_on(r["tokenized"], r["second"])
        assert "rank 1: " not in r["partial"] and "none for ranks [1]" in r["partial"]
        assert "accelerator_config={'dispatch_batches': False}" in r["dispatched"]
    assert not rows(ranks[0]["full"]) & rows(ranks[1]["full"])  # each rank its own shards
    assert ranks[0]["full"][20:] != ranks[0]["full"][:10]  # epoch 2, which the stop is in, in another order
