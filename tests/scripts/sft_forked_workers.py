"""TRL's SFTTrainer on a uc-volume chat stream, trained through 2 forked DataLoader workers.

Usage: sft_forked_workers.py DATA_DIR OUT_DIR STEPS

`SFTTrainer` takes a first row of the stream in its constructor, so the
workers are forked from a process that has read. A tiny Llama built from a
config, a word-level tokenizer with a chat template: nothing is downloaded.
Prints the steps trained and the rows the workers tokenized, as JSON.
"""

import json
import sys

from datasets import load_dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import SFTConfig, SFTTrainer

import air_hf  # noqa: F401

TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant: {% endif %}")

data_dir, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
words = ["[PAD]", "[UNK]", "[EOS]", "user:", "assistant:", "hello", "there", *(f"row{k}" for k in range(1000))]
core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", eos_token="[EOS]", unk_token="[UNK]",
                                    chat_template=TEMPLATE)
model = LlamaForCausalLM(LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64))
stream = load_dataset("uc-volume", data_dir=data_dir, split="train", streaming=True, num_workers=2)
args = SFTConfig(output_dir=out, max_steps=steps, per_device_train_batch_size=4, dataloader_num_workers=2,
                 max_length=32, report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
                 dataloader_persistent_workers=False)
trainer = SFTTrainer(model=model, args=args, train_dataset=stream, processing_class=tokenizer)
result = trainer.train()
print(json.dumps({"steps": result.global_step}))
