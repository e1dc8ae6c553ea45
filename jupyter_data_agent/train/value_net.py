"""Train JUPITER's value model from search trajectories.

Targets are the nodes' MCTS Q-values (value_sum / visits), normalized to
[-1, 1] (divided by the largest |Q| when rewards were on a larger scale), the
loss is MSE against the tanh head. The backbone gets a LoRA adapter on its
attention projections (r = 8, alpha = 32, dropout 0.1); the head is trained
in full. AdamW with linear warmup and decay, weight decay 0.01.

Checkpoints hold only what training changes (LoRA + head), the optimizer,
the scheduler and the RNG state, and the data order is a pure function of
(seed, epoch): a resumed run continues exactly where the interrupted one
stopped and ends with the same weights.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..search.trajectories import TrajectoryRecord, read_jsonl
from ..search.value_net import (
    ADAPTER_DIR,
    HEAD_NAME,
    ValueHead,
    ValueModelConfig,
    ValueNetwork,
    encode_history,
    hidden_size_of,
    load_backbone,
    load_head_state,
    load_tokenizer,
    pad_batch,
    save_head,
)

ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
CHECKPOINTS = "checkpoints"
TRAINABLE = "trainable.safetensors"
STATE = "trainer_state.json"


@dataclass
class TrainConfig:
    trajectories: list[str]
    base: str
    out: str
    gguf_file: str | None = None
    init: str | None = None  # a trained value model to continue from (adapter + head)
    epochs: int = 1
    max_steps: int | None = None
    batch_size: int = 4
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_length: int = 1024
    lora_r: int = 8
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    head_dropout: float = 0.1
    grad_clip: float = 1.0
    save_every: int = 100
    keep_checkpoints: int = 2
    resume: bool = False
    seed: int = 0
    device: str = "cpu"
    progress: bool = True


@dataclass
class Example:
    messages: list[dict]
    target: float


@dataclass
class TrainResult:
    out: str
    steps: int
    losses: list[float] = field(default_factory=list)
    examples: int = 0
    resumed_from: int = 0
    network: ValueNetwork | None = field(default=None, repr=False)
    tokenizer: object = field(default=None, repr=False)


# ------------------------------------------------------------------ data

def normalize_q(qs: Sequence[float]) -> list[float]:
    """Q-values into [-1, 1]: unchanged when already inside, else scaled by max |Q|."""
    scale = max([1.0] + [abs(q) for q in qs])
    return [q / scale for q in qs]


def examples_from_records(records: Iterable[TrajectoryRecord]) -> list[Example]:
    """One example per visited node with a history beyond the task."""
    kept = [r for r in records if r.visits and r.visits > 0 and r.messages]
    targets = normalize_q([r.value_sum / r.visits for r in kept])
    return [Example(r.messages, t) for r, t in zip(kept, targets)]


def load_examples(paths: Sequence[str | os.PathLike]) -> list[Example]:
    """Trajectory files (JSONL) and decisions stores (``.sqlite``) together."""
    from .decisions import is_store, load_store

    records: list[TrajectoryRecord] = []
    for p in paths:
        records.extend(load_store(p) if is_store(p) else read_jsonl(p))
    return examples_from_records(records)


# ------------------------------------------------------------------ model

def _lora_targets(backbone: torch.nn.Module) -> list[str] | None:
    names = {n.rsplit(".", 1)[-1] for n, _ in backbone.named_modules()}
    found = [t for t in ATTENTION_PROJECTIONS if t in names]
    return found or None  # None: PEFT's default for this architecture


def build_network(cfg: TrainConfig) -> tuple[ValueNetwork, object]:
    """A fresh LoRA adapter and head, or (``cfg.init``) the trained ones, trainable."""
    from peft import LoraConfig, PeftModel, TaskType, get_peft_model

    backbone = load_backbone(cfg.base, cfg.gguf_file)
    if cfg.init:
        init = ValueModelConfig.load(cfg.init)
        backbone = PeftModel.from_pretrained(backbone, str(Path(cfg.init) / (init.adapter or ADAPTER_DIR)),
                                             is_trainable=True)
        head = ValueHead(hidden_size_of(backbone.get_base_model()), cfg.head_dropout)
        head.load_state_dict(load_head_state(Path(cfg.init) / init.head))
    else:
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules=_lora_targets(backbone), task_type=TaskType.FEATURE_EXTRACTION)
        backbone = get_peft_model(backbone, lora)
        head = ValueHead(hidden_size_of(backbone.get_base_model()), cfg.head_dropout)
    return ValueNetwork(backbone, head), load_tokenizer(cfg.base, cfg.gguf_file)


def trainable_state(network: ValueNetwork) -> dict[str, torch.Tensor]:
    names = {n for n, p in network.named_parameters() if p.requires_grad}
    return {k: v.detach().cpu().contiguous() for k, v in network.state_dict().items() if k in names}


def save_model(network: ValueNetwork, cfg: TrainConfig, out: Path) -> None:
    """The output directory: loadable by ``ValueModel.load``."""
    out.mkdir(parents=True, exist_ok=True)
    network.backbone.save_pretrained(str(out / ADAPTER_DIR))
    save_head(network.head, out)
    base = cfg.base
    if os.path.exists(base):
        base = os.path.abspath(base)
    ValueModelConfig(base=base, gguf_file=cfg.gguf_file, adapter=ADAPTER_DIR, head=HEAD_NAME,
                     hidden_size=network.head.linear.in_features, dropout=cfg.head_dropout,
                     max_length=cfg.max_length).save(out)


# ------------------------------------------------------------------ checkpoints

def _checkpoints(out: Path) -> list[Path]:
    d = out / CHECKPOINTS
    if not d.is_dir():
        return []
    found = [p for p in d.iterdir() if p.name.startswith("step-") and (p / STATE).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-", 1)[1]))


def save_checkpoint(out: Path, step: int, network, optimizer, scheduler, losses, cfg) -> Path:
    from safetensors.torch import save_file

    path = out / CHECKPOINTS / f"step-{step}"
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(trainable_state(network), str(tmp / TRAINABLE))
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state()}, tmp / "optimizer.pt")
    (tmp / STATE).write_text(json.dumps({"step": step, "losses": losses, "config": asdict(cfg)}))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)  # a crash mid-save never leaves a half checkpoint under the real name
    for old in _checkpoints(out)[: -max(1, cfg.keep_checkpoints)]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def load_checkpoint(path: Path, network, optimizer, scheduler) -> tuple[int, list[float]]:
    from safetensors.torch import load_file

    missing = network.load_state_dict(load_file(str(path / TRAINABLE)), strict=False)
    if missing.unexpected_keys:
        raise ValueError(f"checkpoint {path} does not match the model: {missing.unexpected_keys[:3]}")
    extra = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False)
    optimizer.load_state_dict(extra["optimizer"])
    scheduler.load_state_dict(extra["scheduler"])
    torch.set_rng_state(extra["rng"])
    state = json.loads((path / STATE).read_text())
    return int(state["step"]), list(state.get("losses", []))


# ------------------------------------------------------------------ training

def _order(n: int, seed: int, epoch: int) -> list[int]:
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n, generator=g).tolist()


def evaluate_loss(network: ValueNetwork, tokenizer, examples: Sequence[Example], max_length: int,
                  batch_size: int = 8, device: str = "cpu") -> float:
    """Mean squared error over ``examples`` in eval mode (no dropout)."""
    network.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            batch = examples[i: i + batch_size]
            ids, mask = pad_batch([encode_history(tokenizer, e.messages, max_length) for e in batch],
                                  tokenizer.pad_token_id or 0)
            pred = network(ids.to(device), mask.to(device)).float().cpu()
            target = torch.tensor([e.target for e in batch])
            total += float(((pred - target) ** 2).sum())
            n += len(batch)
    return total / max(1, n)


def train_value_model(cfg: TrainConfig, examples: Sequence[Example] | None = None,
                      on_step: Callable[[int, float], None] | None = None) -> TrainResult:
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if examples is None:
        examples = load_examples(cfg.trajectories)
    if not examples:
        raise ValueError("no training examples: the trajectories hold no visited nodes")
    torch.manual_seed(cfg.seed)
    network, tokenizer = build_network(cfg)
    network.to(cfg.device)
    encoded = [encode_history(tokenizer, e.messages, cfg.max_length) for e in examples]
    targets = [e.target for e in examples]
    per_epoch = math.ceil(len(examples) / cfg.batch_size)
    total = cfg.max_steps or cfg.epochs * per_epoch
    params = [p for p in network.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr)
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(cfg.warmup_ratio * total), total)
    step, losses = 0, []
    if cfg.resume:
        found = _checkpoints(out)
        if found:
            step, losses = load_checkpoint(found[-1], network, optimizer, scheduler)
    resumed_from = step
    pad = tokenizer.pad_token_id or 0
    bar = tqdm(total=total, initial=step, desc="train-value", unit="step", disable=not cfg.progress)
    network.train()
    try:
        while step < total:
            epoch, k = divmod(step, per_epoch)
            order = _order(len(examples), cfg.seed, epoch)
            idx = order[k * cfg.batch_size: (k + 1) * cfg.batch_size]
            ids, mask = pad_batch([encoded[i] for i in idx], pad)
            target = torch.tensor([targets[i] for i in idx], dtype=torch.float32, device=cfg.device)
            pred = network(ids.to(cfg.device), mask.to(cfg.device)).float()
            loss = torch.nn.functional.mse_loss(pred, target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            optimizer.step()
            scheduler.step()
            step += 1
            value = loss.item()
            losses.append(value)
            bar.update(1)
            bar.set_postfix(loss=f"{value:.4f}")
            if on_step is not None:
                on_step(step, value)
            if cfg.save_every and step % cfg.save_every == 0 and step < total:
                save_checkpoint(out, step, network, optimizer, scheduler, losses, cfg)
    finally:
        bar.close()
    network.eval()
    save_model(network, cfg, out)
    return TrainResult(str(out), step, losses, len(examples), resumed_from, network, tokenizer)


__all__ = [
    "Example",
    "TrainConfig",
    "TrainResult",
    "build_network",
    "evaluate_loss",
    "examples_from_records",
    "load_examples",
    "normalize_q",
    "save_model",
    "train_value_model",
]
