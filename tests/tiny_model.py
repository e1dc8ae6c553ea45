"""A tiny randomly initialized Llama with a tokenizer trained offline, for tests.

The tokenizer is a byte-level BPE trained on a few lines of ASCII code, so
every token decodes to ASCII and text round-trips exactly.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CORPUS = [
    "import pandas as pd",
    "df = pd.read_csv('flights.csv')",
    "df.groupby('airline').delay.mean()",
    "df.head()",
    "print(df.shape)",
    "# In[ ]:",
    "# Step 1: load the data",
    "result = df[df.delay > 10]",
] * 20
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tiny_model(path: Path, max_positions: int = 256) -> Path:
    """Save a tiny Llama and its tokenizer to ``path``: the real loading path, no hub."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(vocab_size=200, special_tokens=["<pad>", "<s>", "</s>"], show_progress=False),
    )
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    hf_tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=max_positions,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        initializer_range=0.5,  # peaked distributions: varied greedy text
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # special tokens get logit 0: long outputs, rarely an early EOS
        model.lm_head.weight[:3] = 0
    model.save_pretrained(path)
    hf_tok.save_pretrained(path)
    return path
