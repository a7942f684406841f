#!/usr/bin/python3
"""torch_train.py: the peer of `pipemem train` for bench/bench_train.c: the same
GPT (scripts/torch_reference.py's forward), the same shape, AdamW with the same
hyperparameters, gradient clipping and LR schedule, on random token batches
(ids below --vocab: 256 for bytes, 50257 for GPT-2's shape).
Prints one JSON line: steps, median_step_ms, tokens_per_s, final_loss, threads,
omp_wait_policy.
Timing as pipemem's: per-step wall time (CLOCK_MONOTONIC), median over steps.

usage: torch_train.py --layers L --dim C --heads H --ctx T --batch B --steps N --threads N
                      [--vocab V]
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

# Debian's torch runs elementwise ops on libgomp's OpenMP threads and matmuls
# on OpenBLAS's own pthreads. libgomp's idle threads spin by default, so on 2
# cores the two pools of 2 threads take turns spinning against each other:
# GPT-2 small's step took 11 s instead of 2.8 s, the byte shape's 2.5 s
# instead of 1.6 s. Idle OpenMP threads sleep instead (read when torch loads
# libgomp, so set before the import); an OMP_WAIT_POLICY already set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import torch_reference as ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for k, d in [("layers", 6), ("dim", 512), ("heads", 8), ("ctx", 256), ("batch", 8),
                 ("steps", 5), ("threads", 2), ("vocab", 256)]:
        ap.add_argument("--" + k, type=int, default=d)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    cfg = dict(vocab=a.vocab, ctx=a.ctx, dim=a.dim, heads=a.heads, layers=a.layers,
               steps=a.steps, warmup=a.steps // 10 if a.steps >= 10 else 0, lr=1e-3,
               lr_min_frac=0.1)
    table = ref.tensor_table(cfg)
    P = {}
    for name, shape, _ in table:
        if len(shape) == 2:
            P[name] = (torch.randn(shape) * 0.02).requires_grad_(True)
        else:
            P[name] = (torch.ones(shape) if "ln" in name else torch.zeros(shape)).requires_grad_(True)
    groups = [{"params": [P[n] for n, _, d in table if d], "weight_decay": 0.1},
              {"params": [P[n] for n, _, d in table if not d], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    times, loss = [], float("nan")
    for step in range(a.steps):
        data = torch.randint(0, a.vocab, (a.batch, a.ctx + 1))
        tok, tgt = data[:, :-1], data[:, 1:]
        t0 = time.monotonic()
        for g in opt.param_groups:
            g["lr"] = ref.lr_at(cfg, step)
        opt.zero_grad()
        lo = F.cross_entropy(ref.forward(cfg, P, tok).view(-1, a.vocab), tgt.reshape(-1))
        lo.backward()
        torch.nn.utils.clip_grad_norm_([P[n] for n, _, _ in table], 1.0)
        opt.step()
        loss = lo.item()
        times.append(time.monotonic() - t0)
    med = statistics.median(times)
    print(json.dumps({"steps": a.steps, "median_step_ms": med * 1e3,
                      "tokens_per_s": a.batch * a.ctx / med, "final_loss": loss,
                      "threads": torch.get_num_threads(),
                      "omp_wait_policy": os.environ["OMP_WAIT_POLICY"]}))


if __name__ == "__main__":
    main()
