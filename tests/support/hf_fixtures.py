"""A small labelled text set, a tokenizer trained on it, and a tiny BERT: Hugging Face
tests, examples and the ``transformers`` benchmark, with no hub access.

* :func:`make_sentences` — short review-like sentences whose label is the sentiment word
  they contain (a separable set), generated deterministically from a seed.
* :func:`train_tokenizer` — a word-level tokenizer trained with the ``tokenizers`` library
  on the training text, wrapped as a ``PreTrainedTokenizerFast`` (saved with checkpoints,
  so a pipeline loads it back from there).
* :func:`tiny_bert` — ``BertForSequenceClassification`` from a config: 2 layers, hidden 64.
* :class:`EncodedTextDataset` / :func:`encoded_frame` — the sentences tokenized, as a torch
  map-style dataset or a pandas DataFrame (``input_ids``, ``attention_mask``, ``labels``).

Everything here is built in well under a second.
"""

from __future__ import annotations

import random
from typing import Any, Dict, List, Sequence, Tuple

from torch.utils.data import Dataset

LABELS = {0: "negative", 1: "positive"}
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MAX_LENGTH = 32

_SUBJECTS = [
    "the movie", "this phone", "our hotel room", "the service", "my new laptop", "the food",
    "that concert", "the book", "the staff", "this game", "the weather", "the trip",
    "the coffee", "their app", "the lecture", "the museum", "this album", "the car",
    "the delivery", "the show",
]
_POSITIVE = ["great", "wonderful", "excellent", "delightful", "fantastic", "superb",
             "amazing", "lovely", "brilliant", "pleasant", "enjoyable", "charming"]
_NEGATIVE = ["terrible", "awful", "horrible", "dreadful", "poor", "disappointing", "boring",
             "annoying", "bad", "miserable", "mediocre", "unpleasant"]
_ADVERBS = ["", "really", "very", "quite", "truly", "rather", "so"]
_TEMPLATES = [
    "{s} was {a} {w}",
    "i think {s} is {a}",
    "honestly {s} felt {a} {w}",
    "{s} turned out {a} overall",
    "we found {s} {a} {w}",
    "everyone said {s} was {a}",
    "after a week {s} still seems {a}",
    "{w} {s} looked {a} to me",
]
_FILLERS = ["", "today", "again", "this time", "as expected", "at first", "in the end",
            "for the price", "yesterday", "on sunday"]


def make_sentences(n: int, seed: int = 0) -> Tuple[List[str], List[int]]:
    """``n`` sentences and their labels (0 negative, 1 positive), balanced, same for a
    given seed."""
    rng = random.Random(seed)
    texts, labels = [], []
    for i in range(n):
        label = i % 2
        word = rng.choice(_POSITIVE if label else _NEGATIVE)
        adverb = rng.choice(_ADVERBS)
        text = rng.choice(_TEMPLATES).format(
            s=rng.choice(_SUBJECTS), a=f"{adverb} {word}".strip(), w=rng.choice(_FILLERS))
        texts.append(" ".join(text.split()))
        labels.append(label)
    order = list(range(n))
    rng.shuffle(order)
    return [texts[i] for i in order], [labels[i] for i in order]


def make_splits(n_train: int = 3000, n_val: int = 600, seed: int = 0
                ) -> Dict[str, Tuple[List[str], List[int]]]:
    """Train and validation sentences from different seeds."""
    return {"train": make_sentences(n_train, seed), "validation": make_sentences(n_val, seed + 1)}


def train_tokenizer(texts: Sequence[str]) -> Any:
    """A word-level tokenizer (``[CLS] text [SEP]``) trained on ``texts``, as a
    ``transformers.PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing
    from tokenizers.trainers import WordLevelTrainer
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.train_from_iterator(texts, WordLevelTrainer(special_tokens=SPECIAL_TOKENS))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_max_length=MAX_LENGTH)


def tiny_bert(vocab_size: int, seed: int = 0) -> Any:
    """``BertForSequenceClassification`` from a config: 2 layers, hidden 64, 2 labels."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=MAX_LENGTH, num_labels=2,
        id2label=dict(LABELS), label2id={v: k for k, v in LABELS.items()})
    torch.manual_seed(seed)
    return BertForSequenceClassification(config)


def encode(tokenizer: Any, texts: Sequence[str], labels: Sequence[int]) -> List[Dict[str, Any]]:
    """Rows of ``input_ids``, ``attention_mask`` (unpadded lists) and ``labels``."""
    enc = tokenizer(list(texts), truncation=True, max_length=MAX_LENGTH)
    return [{"input_ids": ids, "attention_mask": mask, "labels": int(label)}
            for ids, mask, label in zip(enc["input_ids"], enc["attention_mask"], labels)]


class EncodedTextDataset(Dataset):
    """A torch map-style dataset of encoded rows (see :func:`encode`)."""

    def __init__(self, rows: List[Dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Dict[str, Any]:
        return self.rows[i]


def torch_dataset(tokenizer: Any, texts: Sequence[str], labels: Sequence[int]
                  ) -> EncodedTextDataset:
    """The encoded sentences as a torch map-style dataset."""
    return EncodedTextDataset(encode(tokenizer, texts, labels))


def encoded_frame(tokenizer: Any, texts: Sequence[str], labels: Sequence[int]) -> Any:
    """The encoded rows as a pandas DataFrame (list columns)."""
    import pandas as pd

    return pd.DataFrame(encode(tokenizer, texts, labels))


def accuracy_metric(eval_pred: Any) -> Dict[str, float]:
    """``compute_metrics`` for ``transformers.Trainer``: accuracy of the argmax."""
    import numpy as np

    logits, labels = eval_pred
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}
