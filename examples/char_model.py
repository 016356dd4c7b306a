"""A character-level language model, trained twice: once with tensortools'
``nn.LLTMSequence`` as its recurrent layer and once with ``torch.nn.LSTM`` of the same
state size, on the same batches from the same start. Prints each model's loss on held-out
text, its training speed in tokens per second, and draws both loss curves in one figure.

The text is Python source shipped with the standard library (no download)::

    python examples/char_model.py --steps 400 --plot char_model.png
    python examples/char_model.py --device cuda

A model that has learned nothing predicts every character alike: its loss is ln(V) for V
distinct characters. Both models must end far below that.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import time

import torch
from torch import Tensor

import tensortools

#: Standard-library modules whose source is the corpus (pure Python, in every install).
CORPUS_MODULES = ("argparse", "textwrap", "difflib", "json.decoder", "json.encoder", "string")


def corpus() -> str:
    import importlib

    return "\n".join(inspect.getsource(importlib.import_module(m)) for m in CORPUS_MODULES)


class CharModel(torch.nn.Module):
    """Embedding -> recurrent layer (T x B) -> linear read-out over the characters."""

    def __init__(self, vocab: int, embed: int, state: int, layer: str) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, embed)
        if layer == "LLTM":
            self.rnn = tensortools.nn.LLTMSequence(embed, state)
        elif layer == "LSTM":
            self.rnn = torch.nn.LSTM(embed, state)
        else:
            raise ValueError(f"CharModel: 'layer' must be 'LLTM' or 'LSTM', got {layer!r}")
        self.out = torch.nn.Linear(state, vocab)

    def forward(self, chars: Tensor) -> Tensor:  # chars: T x B indices -> T x B x V logits
        hidden, _ = self.rnn(self.embed(chars))
        return self.out(hidden)


@dataclasses.dataclass
class Result:
    layer: str
    losses: list[float]  # training loss per step
    validation: float  # mean loss on held-out text after training
    tokens_per_second: float
    parameters: int


def batches(data: Tensor, steps: int, batch: int, length: int, seed: int):
    """`steps` batches of `batch` windows of `length` + 1 characters, T x B, the same
    sequence for every model trained with the same seed."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - length - 1, (batch,), generator=g)
        window = torch.stack([data[s : s + length + 1] for s in starts.tolist()], dim=1)
        yield window[:-1], window[1:]


def evaluate(model: CharModel, data: Tensor, length: int, device: str) -> float:
    """Mean cross-entropy over held-out text, in windows of `length` characters."""
    n = (len(data) - 1) // length
    x = data[: n * length].view(n, length).t().to(device)
    y = data[1 : n * length + 1].view(n, length).t().to(device)
    with torch.no_grad():
        logits = model(x)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()).item()


def train(
    layer: str,
    train_data: Tensor,
    valid_data: Tensor,
    vocab: int,
    *,
    steps: int,
    batch: int,
    length: int,
    embed: int,
    state: int,
    lr: float,
    device: str,
    seed: int = 0,
) -> Result:
    torch.manual_seed(seed)
    model = CharModel(vocab, embed, state, layer).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    start = time.perf_counter()
    for x, y in batches(train_data, steps, batch, length, seed):
        x, y = x.to(device), y.to(device)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())  # (also waits for the device, so the clock is right)
    elapsed = time.perf_counter() - start
    return Result(
        layer,
        losses,
        evaluate(model, valid_data, length, device),
        steps * batch * length / elapsed,
        sum(p.numel() for p in model.parameters()),
    )


def plot(results: list[Result], path: str, baseline: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for r in results:
        ax.plot(r.losses, label=f"{r.layer} (held-out {r.validation:.2f})", linewidth=1)
    ax.axhline(baseline, color="grey", linestyle=":", label=f"no learning, ln V = {baseline:.2f}")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[Result]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="training steps (default 400)")
    parser.add_argument("--batch", type=int, default=32, help="sequences per step (default 32)")
    parser.add_argument("--length", type=int, default=64, help="characters per sequence (64)")
    parser.add_argument("--embed", type=int, default=32, help="embedding size (default 32)")
    parser.add_argument("--state", type=int, default=128, help="state size (default 128)")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate (3e-3)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--plot", metavar="PATH", help="draw both loss curves (needs matplotlib)")
    args = parser.parse_args(argv)

    text = corpus()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    split = int(0.9 * len(data))
    train_data, valid_data = data[:split], data[split:]
    baseline = math.log(len(chars))
    print(
        f"corpus: {len(text):,} characters of stdlib source, {len(chars)} distinct "
        f"(no learning: loss ln {len(chars)} = {baseline:.2f}); {args.steps} steps of "
        f"{args.batch} x {args.length} characters on {args.device}"
    )
    results = [
        train(
            layer,
            train_data,
            valid_data,
            len(chars),
            steps=args.steps,
            batch=args.batch,
            length=args.length,
            embed=args.embed,
            state=args.state,
            lr=args.lr,
            device=args.device,
        )
        for layer in ("LLTM", "LSTM")
    ]
    print(
        f"{'layer':<6} {'parameters':>10} {'first loss':>10} {'last loss':>10} "
        f"{'held-out':>9} {'tokens/s':>10}"
    )
    for r in results:
        last = sum(r.losses[-20:]) / len(r.losses[-20:])
        print(
            f"{r.layer:<6} {r.parameters:>10,} {r.losses[0]:>10.3f} {last:>10.3f} "
            f"{r.validation:>9.3f} {r.tokens_per_second:>10,.0f}"
        )
    print("last loss: mean of the last 20 steps; held-out: the last 10% of the corpus")
    if args.plot:
        plot(results, args.plot, baseline)
        print(f"plot written to {args.plot}")
    return results


if __name__ == "__main__":
    main()
