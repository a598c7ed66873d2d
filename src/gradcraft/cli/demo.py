"""`gradcraft demo`: a one-minute end-to-end check of the engine (an MLP learns sin(x))."""

import math
import time

from gradcraft.cli.common import positive_float, positive_int, seed


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="train a small MLP on sin(x) with the engine, as a smoke test",
        description="A one-minute end-to-end check of the engine: a two-layer MLP learns sin(x) by plain SGD "
        "(the autograd, the ops and the backend, no data or model files).",
    )
    p.add_argument("--steps", type=positive_int, default=1000, help="SGD steps")
    p.add_argument("--hidden", type=positive_int, default=64, help="hidden units of the MLP")
    p.add_argument("--lr", type=positive_float, default=0.02, help="learning rate")
    p.add_argument("--seed", type=seed, default=0, help="random seed")
    p.set_defaults(func=run)


def run(args) -> int:
    import gradcraft as gc

    gc.manual_seed(args.seed)
    x = (gc.rand(256, 1) * 2 * math.pi - math.pi).realize()
    y = x.sin().realize()
    w1 = (gc.randn(1, args.hidden) * 1.0).realize().requires_grad_()
    b1 = gc.zeros(args.hidden, requires_grad=True)
    w2 = (gc.randn(args.hidden, 1) * (1 / math.sqrt(args.hidden))).realize().requires_grad_()
    b2 = gc.zeros(1, requires_grad=True)
    params = [w1, b1, w2, b2]
    start = time.perf_counter()
    for step in range(args.steps + 1):
        pred = (x @ w1 + b1).tanh() @ w2 + b2
        loss = ((pred - y) ** 2).mean()
        loss.backward()
        gc.realize(*[p.assign(p - args.lr * p.grad) for p in params])  # plain SGD, one schedule
        for p in params:
            p.zero_grad()
        if step % 100 == 0:
            print(f"step {step:4d}  mse {loss.item():.5f}")
    print(f"done in {time.perf_counter() - start:.1f}s; final mse {loss.item():.5f}")
    return 0
