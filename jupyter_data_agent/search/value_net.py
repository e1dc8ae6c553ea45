"""JUPITER's value model: a causal LM backbone with a scalar head.

value(state) = tanh(Linear(dropout(mean over valid tokens of the final hidden
states))). The input is the node's message history, rendered the same way at
training and at inference, truncated from the left to ``max_length`` tokens
but always keeping the system and task messages: without the task no state
can be judged.

A model directory holds ``value_config.json`` (base model id or path,
optional GGUF file, hidden size, max length), ``value_head.safetensors`` (or
``value_head.pt``) and, when fine-tuned, a PEFT LoRA adapter in ``adapter/``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import nn

from .base import SearchStats

CONFIG_NAME = "value_config.json"
HEAD_NAME = "value_head.safetensors"
HEAD_NAME_PT = "value_head.pt"
ADAPTER_DIR = "adapter"
FORMAT = "jupyter-data-agent/value-model@1"


@dataclass
class ValueModelConfig:
    base: str
    gguf_file: str | None = None
    adapter: str | None = ADAPTER_DIR
    head: str = HEAD_NAME
    hidden_size: int = 0
    dropout: float = 0.1
    max_length: int = 1024
    format: str = FORMAT

    def save(self, directory: str | os.PathLike) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / CONFIG_NAME).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "ValueModelConfig":
        path = Path(directory) / CONFIG_NAME
        if not path.is_file():
            raise FileNotFoundError(f"{directory} is not a value model directory (no {CONFIG_NAME})")
        data = json.loads(path.read_text())
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class ValueHead(nn.Module):
    """Mean-pool over the attention mask, dropout, Linear to one scalar, Tanh."""

    def __init__(self, hidden_size: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
        return torch.tanh(self.linear(self.dropout(pooled.to(self.linear.weight.dtype)))).squeeze(-1)


class ValueNetwork(nn.Module):
    def __init__(self, backbone: nn.Module, head: ValueHead) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                            output_hidden_states=True, use_cache=False)
        hidden = getattr(out, "last_hidden_state", None)
        if hidden is None:
            hidden = out.hidden_states[-1]
        return self.head(hidden, attention_mask)


# ------------------------------------------------------------------ inputs

def render_message(message: dict) -> str:
    return f"<|{message['role']}|>\n{message['content']}\n"


def _task_end(messages: Sequence[dict]) -> int:
    """Messages up to and including the first user message (the task) are kept."""
    for i, m in enumerate(messages):
        if m.get("role") == "user":
            return i + 1
    return min(1, len(messages))


def encode_history(tokenizer, messages: Sequence[dict], max_length: int) -> list[int]:
    """Token ids of the history: head (system + task) + the newest tokens that fit."""
    k = _task_end(messages)
    head = tokenizer("".join(render_message(m) for m in messages[:k]),
                     add_special_tokens=False)["input_ids"]
    tail = tokenizer("".join(render_message(m) for m in messages[k:]),
                     add_special_tokens=False)["input_ids"] if len(messages) > k else []
    bos = [tokenizer.bos_token_id] if getattr(tokenizer, "bos_token_id", None) is not None else []
    budget = max_length - len(bos)
    if len(head) + len(tail) <= budget:
        return bos + head + tail
    head = head[: max(budget // 2, budget - len(tail))]  # a huge task still leaves room
    room = budget - len(head)
    return bos + head + (tail[len(tail) - room:] if room > 0 else [])


def pad_batch(seqs: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(1, max(len(s) for s in seqs))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


# ------------------------------------------------------------------ loading

def resolve_base(base: str, directory: str | os.PathLike) -> str:
    """A base given relative to the value model's directory, as a path from here."""
    p = Path(base)
    if not p.is_absolute() and (Path(directory) / p).exists():
        return str(Path(directory) / p)
    return base


def load_backbone(base: str, gguf_file: str | None = None, dtype=torch.float32):
    """The base LM without its LM head (hidden states are all the value needs)."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    kwargs = {"dtype": dtype}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the unused LM head is expected, not worth a report
    try:
        return AutoModel.from_pretrained(base, **kwargs)
    finally:
        hf_logging.set_verbosity(level)


def load_tokenizer(base: str, gguf_file: str | None = None):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base, **({"gguf_file": gguf_file} if gguf_file else {}))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def hidden_size_of(backbone: nn.Module) -> int:
    cfg = backbone.config
    for name in ("hidden_size", "n_embd", "d_model"):
        if getattr(cfg, name, None):
            return int(getattr(cfg, name))
    raise ValueError("cannot tell the backbone's hidden size")


def save_head(head: ValueHead, directory: str | os.PathLike) -> None:
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()},
              str(Path(directory) / HEAD_NAME))


def load_head_state(path: Path) -> dict:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(str(path), map_location="cpu", weights_only=True)


class ValueModel:
    """A loaded value model; also a :class:`~.value.ValueEstimator`."""

    name = "value-model"
    label = "value model"

    def __init__(self, network: ValueNetwork, tokenizer, config: ValueModelConfig,
                 device: str = "cpu") -> None:
        self.network = network.to(device).eval()
        self.tokenizer = tokenizer
        self.config = config
        self.device = device
        self._lock = threading.Lock()

    @classmethod
    def load(cls, directory: str | os.PathLike, device: str = "cpu") -> "ValueModel":
        directory = Path(directory)
        cfg = ValueModelConfig.load(directory)
        base = resolve_base(cfg.base, directory)
        backbone = load_backbone(base, cfg.gguf_file)
        adapter = directory / cfg.adapter if cfg.adapter else None
        if adapter is not None and adapter.is_dir():
            from peft import PeftModel

            backbone = PeftModel.from_pretrained(backbone, str(adapter)).merge_and_unload()
        head = ValueHead(cfg.hidden_size or hidden_size_of(backbone), cfg.dropout)
        head_path = directory / cfg.head
        if not head_path.is_file() and (directory / HEAD_NAME_PT).is_file():
            head_path = directory / HEAD_NAME_PT
        head.load_state_dict(load_head_state(head_path))
        model = cls(ValueNetwork(backbone, head), load_tokenizer(base, cfg.gguf_file), cfg, device)
        model.label = f"value model {directory}"  # what a Search turn says guided it
        return model

    def encode(self, histories: Sequence[Sequence[dict]]) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = [encode_history(self.tokenizer, h, self.config.max_length) for h in histories]
        ids, mask = pad_batch(seqs, self.tokenizer.pad_token_id or 0)
        return ids.to(self.device), mask.to(self.device)

    @torch.inference_mode()
    def predict(self, histories: Sequence[Sequence[dict]], batch_size: int = 8) -> list[float]:
        out: list[float] = []
        with self._lock:
            self.network.eval()
            for i in range(0, len(histories), batch_size):
                ids, mask = self.encode(histories[i: i + batch_size])
                out.extend(float(v) for v in self.network(ids, mask).float().cpu())
        return out

    def estimate(self, states, stats: SearchStats | None = None) -> list[float]:
        return self.predict([s.messages for s in states])


__all__ = [
    "ValueHead",
    "ValueModel",
    "ValueModelConfig",
    "ValueNetwork",
    "encode_history",
    "load_backbone",
    "load_tokenizer",
    "pad_batch",
    "resolve_base",
    "save_head",
]
