"""StreamResumeCallback under TRL's SFTTrainer on a vision-language model: LLaVA's records, naming images under a
sibling images/ folder, streamed into TRL's vision shape (`messages` + `images`), stopped and resumed, train on the
rows and images the run uninterrupted trained on, and no image of the finished steps is fetched again; nor, resumed
from its `state_dict()`, does the stream alone fetch an image of a record before its position."""

from __future__ import annotations

import gc
import threading

import pytest
import torch
from datasets import load_dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (CLIPImageProcessorPil, CLIPVisionConfig, LlamaConfig, LlavaConfig,
                          LlavaForConditionalGeneration, LlavaProcessor, PreTrainedTokenizerFast)

import air_hf
from air_core.io.cache import Cache
from conftest import wait_for
from test_media_records import jsonl, llava_records
from test_trainer_resume_reads import fetched
from test_trainer_resume_trl import ROWS, Recording

trl = pytest.importorskip("trl", reason="TRL is in the dev extra")

ROLES = {"human": "user", "gpt": "assistant"}
# Content given as blocks (TRL's vision collator gives every turn so) or as text; an image block is the processor's
# <image>, which it widens to one token a patch.
TEMPLATE = ("{% for m in messages %}{{ m['role'] }} {% if m['content'] is string %}{{ m['content'] }} {% else %}"
            "{% for c in m['content'] %}{% if c['type'] == 'image' %}<image> {% else %}{{ c['text'] }} {% endif %}"
            "{% endfor %}{% endif %}{% endfor %}")


def write_llava(volume) -> None:  # noqa: ANN001
    """`ROWS` LLaVA records in 4 JSON Lines files under llava/chat/, record k naming image k under llava/images/."""
    records = llava_records(volume, ROWS)
    for f in range(4):
        volume.write(f"llava/chat/part{f}.jsonl", jsonl(records[f * ROWS // 4:(f + 1) * ROWS // 4]))


def load(volume, hf_cache):  # noqa: ANN001, ANN201
    return load_dataset("uc-volume", data_dir=volume.path("llava"), split="train", streaming=True, num_workers=2,
                        media={"image": "image"}, media_dir="images", cache_dir=str(hf_cache))


def llava_chat(row: dict) -> dict:
    """A LLaVA record as TRL's vision shape, as notebooks/media_records.ipynb maps it."""
    return {"messages": [{"role": ROLES[turn["from"]], "content": turn["value"].replace("<image>", "").strip()}
                         for turn in row["conversations"]],
            "images": [row["image"]]}


def processor() -> LlavaProcessor:
    """Record k's answer, "picture k", holds its number as token 6 + k, where `Recording` finds it; images are
    8x8 pixels, unnormalized, so a picture's red channel (k / 255, `png(k)`) tells which it is."""
    vocab = {"[PAD]": 0, "[EOS]": 1, "[UNK]": 2, "user": 3, "assistant": 4, "picture": 5,
             **{str(k): 6 + k for k in range(ROWS)}, "What": 6 + ROWS, "is": 7 + ROWS, "it": 8 + ROWS, "?": 9 + ROWS}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]", unk_token="[UNK]",
                                        extra_special_tokens=["<image>"])
    images = CLIPImageProcessorPil(size={"shortest_edge": 8}, crop_size={"height": 8, "width": 8}, do_normalize=False)
    return LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=4,
                          vision_feature_select_strategy="default", num_additional_image_tokens=1,
                          chat_template=TEMPLATE)


def model(vocab: int, image_token: int) -> LlavaForConditionalGeneration:
    torch.manual_seed(0)
    vision = CLIPVisionConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                              image_size=8, patch_size=4)
    text = LlamaConfig(vocab_size=vocab, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return LlavaForConditionalGeneration(LlavaConfig(vision_config=vision, text_config=text,
                                                     image_token_index=image_token))


class Pictured(Recording):
    """Records the pictures of every micro-batch it trains on, besides the rows its text names."""

    def training_step(self, model, inputs, num_items_in_batch=None):  # noqa: ANN001, ANN201 - Trainer's signature
        red = inputs["pixel_values"][:, 0].mean(dim=(1, 2))
        self.pictures.append(sorted(torch.round(red * 255).int().tolist()))
        return super().training_step(model, inputs, num_items_in_batch)


def sft(volume, out, steps: int, *, resume: bool = False) -> tuple[list[list[int]], list[list[int]]]:  # noqa: ANN001
    """The rows and the pictures of each step of `steps` steps, a checkpoint at the last one when resumed (else at
    every third step); resumed, the node cache is emptied before training."""
    ds = load(volume, out.parent / "hf").map(llava_chat, remove_columns=["image", "conversations"])
    proc = processor()
    args = trl.SFTConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=2, max_length=None,
                         gradient_checkpointing=False, save_strategy="steps", save_steps=steps if resume else 3,
                         report_to=[], logging_strategy="no", disable_tqdm=True, use_cpu=True)
    trainer = Pictured(model=model(len(proc.tokenizer), proc.image_token_id), args=args, train_dataset=ds,
                       processing_class=proc, callbacks=[air_hf.StreamResumeCallback()])
    trainer.seen, trainer.pictures = [], []
    if resume:
        # SFTTrainer reads the stream's first row when it is made (is it a vision set?): what that fetched, and
        # what it had begun to fetch ahead, is not the resume's
        gc.collect()
        wait_for(lambda: not any(t.name == "air-fetch" for t in threading.enumerate()), 10, "the first row's fetches")
        Cache().clear()
    trainer.train(resume_from_checkpoint=resume or None)
    return trainer.seen, trainer.pictures


@pytest.mark.parametrize("mapped", [False, True], ids=["as read", "mapped"])
def test_a_resumed_stream_of_images_fetches_none_before_its_position(volume, tmp_path, mapped):
    # Images are decoded where a row is consumed: a resume must start at the record, not at the start of the run of
    # records it came in (whose images would be fetched again).
    write_llava(volume)
    shape = (lambda ds: ds.map(llava_chat)) if mapped else (lambda ds: ds)
    full = [int(r["id"]) for r in shape(load(volume, tmp_path))]
    ds = shape(load(volume, tmp_path))
    it = iter(ds)
    head = [int(next(it)["id"]) for _ in range(12)]
    state = ds.state_dict()
    del it
    Cache().clear()
    resumed = shape(load(volume, tmp_path))
    resumed.load_state_dict(state)
    assert head + [int(r["id"]) for r in resumed] == full
    assert not fetched(volume, "llava/images") & set(head)


@pytest.mark.slow
def test_vlm_sft_resumed_trains_on_the_rows_and_images_it_would_have_next(volume, tmp_path):
    write_llava(volume)
    full, full_pictures = sft(volume, tmp_path / "full", 9)
    first, first_pictures = sft(volume, tmp_path / "stopped", 6)
    second, second_pictures = sft(volume, tmp_path / "stopped", 9, resume=True)
    assert first + second == full
    assert full_pictures == full  # each row trained on with its own picture
    assert first_pictures + second_pictures == full_pictures
    done = {row for batch in first for row in batch}
    assert len(done) == 12 and not fetched(volume, "llava/images") & done
    assert {row for batch in second for row in batch} <= fetched(volume, "llava/images")
