"""transformers.Trainer on torchrun ranks over an un-split uc-volume stream (dispatch_batches=False).

Usage: hf_trainer.py DATA_DIR HF_CACHE OUT_DIR STEPS. Each rank writes OUT_DIR/rank{r}.json with the
file indices its model saw, in order.
"""

import json
import os
import sys

import torch
from datasets import load_dataset
from transformers import PretrainedConfig, PreTrainedModel, Trainer, TrainingArguments

import air_hf  # noqa: F401  (registers "uc-volume")


class TinyConfig(PretrainedConfig):
    model_type = "tiny-air"


class TinyModel(PreTrainedModel):
    """A linear regression that records the index of every file it is fed."""

    config_class = TinyConfig

    def __init__(self, config):
        super().__init__(config)
        self.linear = torch.nn.Linear(1, 1)
        self.seen: list[int] = []
        self.post_init()

    def forward(self, x, idx, labels=None):
        self.seen.extend(idx.tolist())
        pred = self.linear(x).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(pred, labels), "logits": pred}


def collate(rows):
    idx = torch.tensor([int(r["path"].rsplit("f", 1)[-1].split(".")[0]) for r in rows])
    x = torch.tensor([[float(r["size"])] for r in rows]) / 1000
    return {"x": x, "idx": idx, "labels": 2 * x.squeeze(-1)}


def main() -> None:
    data_dir, hf_cache, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    ds = load_dataset("uc-volume", data_dir=data_dir, split="train", streaming=True, cache_dir=hf_cache,
                      num_workers=2, equalize="drop")
    args = TrainingArguments(
        output_dir=os.path.join(out, "trainer"), max_steps=steps, per_device_train_batch_size=4,
        dataloader_num_workers=2, accelerator_config={"dispatch_batches": False},
        remove_unused_columns=False, report_to=[], save_strategy="no", logging_strategy="no",
        use_cpu=True, ddp_backend="gloo",
    )
    model = TinyModel(TinyConfig())
    Trainer(model=model, args=args, train_dataset=ds, data_collator=collate).train()
    with open(os.path.join(out, f"rank{args.process_index}.json"), "w") as f:
        json.dump({"seen": model.seen, "shards": ds.num_shards}, f)
    # Trainer leaves its gloo group up; one torn down by interpreter exit can abort the process.
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
