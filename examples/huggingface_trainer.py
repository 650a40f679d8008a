"""TransformersTrainer (alias HuggingFaceTrainer): a causal language model with a
``transformers.Trainer`` on every worker.

From the seed pages air-trainers.rst ("HuggingFace Trainer") and train-porting-code.rst
("TransformersTrainer"), ``doc_code/hf_trainer.py``. The seed downloads wikitext-2, the
``gpt2`` config and a tokenizer from the Hugging Face hub; this runs offline: the text is
generated here, a tokenizer is trained on it with the ``tokenizers`` library, and the
model is a 2-layer GPT-2 built from a config. The seed uses 3 workers; this uses 2.
"""

import math
import os
import random
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub access anywhere (workers inherit it)

import ray
import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from tokenizers.trainers import WordLevelTrainer
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from engine import ScalingConfig
from engine.huggingface import TransformersTrainer
from engine.runtime import ensure_ray

# Start Ray before creating datasets, as fit() would: the cluster in RAY_ADDRESS, else a
# local Ray with at least 4 logical CPUs (TRAINYARD_RAY_NUM_CPUS). ray.data would
# otherwise start one with a CPU per core, and on a 2-core machine the 2 workers would
# leave none for reading.
ensure_ray()

block_size = 32


def make_text(n, seed):
    """Short sentences from a small grammar (stand-in for wikitext-2)."""
    rng = random.Random(seed)
    subjects = ["the cat", "a dog", "my neighbour", "the old man", "our teacher", "a bird"]
    verbs = ["sees", "likes", "follows", "finds", "watches", "calls"]
    objects = ["the ball", "a red car", "the garden", "an apple", "the river", "a small boat"]
    endings = ["today .", "again .", "every morning .", "in the rain .", "."]
    return [f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)} "
            f"{rng.choice(endings)}" for _ in range(n)]


texts = {"train": make_text(4000, 0), "validation": make_text(400, 1)}

# A word-level tokenizer trained on the training text, saved where every worker reads it.
tok = Tokenizer(WordLevel(unk_token="[UNK]"))
tok.pre_tokenizer = Whitespace()
tok.train_from_iterator(texts["train"], WordLevelTrainer(special_tokens=["[UNK]", "[EOS]"]))
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]",
                                    eos_token="[EOS]", pad_token="[EOS]")
tokenizer_dir = tempfile.mkdtemp(prefix="example_tokenizer_")
tokenizer.save_pretrained(tokenizer_dir)


def group_texts(lines):
    """Concatenate the tokenized lines and cut them into blocks of ``block_size``."""
    ids = [i for line in lines for i in tokenizer(line + " [EOS]")["input_ids"]]
    total = (len(ids) // block_size) * block_size
    return [{"input_ids": ids[i:i + block_size], "attention_mask": [1] * block_size,
             "labels": ids[i:i + block_size]} for i in range(0, total, block_size)]


ray_train_ds = ray.data.from_items(group_texts(texts["train"]))
ray_evaluation_ds = ray.data.from_items(group_texts(texts["validation"]))


# __hf_trainer_start__
def trainer_init_per_worker(train_dataset, eval_dataset, **config):
    tokenizer = transformers.AutoTokenizer.from_pretrained(config["tokenizer_dir"])
    model_config = GPT2Config(vocab_size=len(tokenizer), n_positions=block_size, n_embd=64,
                              n_layer=2, n_head=2, eos_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(model_config)
    args = transformers.TrainingArguments(
        output_dir="gpt2-tiny-generated",
        eval_strategy="epoch",
        save_strategy="epoch",
        logging_strategy="epoch",
        learning_rate=2e-3,
        weight_decay=0.01,
        num_train_epochs=2,
        per_device_train_batch_size=16,
        report_to="none",
        disable_tqdm=True,
    )
    return transformers.Trainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
    )


scaling_config = ScalingConfig(num_workers=2)
# If using GPUs, use the below scaling config instead.
# scaling_config = ScalingConfig(num_workers=2, use_gpu=True)
trainer = TransformersTrainer(
    trainer_init_per_worker=trainer_init_per_worker,
    trainer_init_config={"tokenizer_dir": tokenizer_dir},
    scaling_config=scaling_config,
    datasets={"train": ray_train_ds, "evaluation": ray_evaluation_ds},
)
result = trainer.fit()
# __hf_trainer_end__

print(result.metrics["epoch"], result.metrics["eval_loss"], result.checkpoint)
assert result.metrics["epoch"] == 2.0
# Far better than guessing the next word uniformly over the vocabulary.
assert result.metrics["eval_loss"] < 0.5 * math.log(len(tokenizer)), result.metrics
with result.checkpoint.as_directory() as checkpoint_dir:
    assert {"model.safetensors", "trainer_state.json"} <= set(os.listdir(checkpoint_dir))
