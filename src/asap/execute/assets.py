"""What a real stack needs besides its config, made locally: a small JSON-lines text corpus and a byte-level BPE
tokenizer trained on it (``tokenizer.json``, the Hugging Face format torchtitan and MaxText read), with a
vocabulary no larger than the model's. Deterministic: the same inputs give the same files."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ("the model trains on tokens and each step moves the loss down while the devices exchange gradients "
         "across data tensor and pipeline groups a schedule interleaves micro batches memory holds weights "
         "optimizer states and activations so the planner prices compute communication and bubbles").split()


def write_corpus(folder: Path, documents: int = 256, words_per_document: int = 160, seed: int = 0) -> Path:
    """``folder/data.json``: one ``{"text": ...}`` object per line (torchtitan's c4_test layout)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    path = folder / "data.json"
    with open(path, "w") as f:
        for _ in range(documents):
            f.write(json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(words_per_document))}) + "\n")
    return path


def write_tokenizer(folder: Path, corpus: Path, vocab_size: int) -> Path:
    """``folder/tokenizer.json`` (+ ``tokenizer_config.json``): byte-level BPE with <|begin_of_text|> and
    <|end_of_text|>, at most ``vocab_size`` entries."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    size = max(len(specials) + 257, min(vocab_size, 4096))
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = [json.loads(line)["text"] for line in corpus.read_text().splitlines()]
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": specials[0], "eos_token": specials[1], "add_bos_token": True, "add_eos_token": False}))
    return folder / "tokenizer.json"
