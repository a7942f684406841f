#!/usr/bin/python3
"""torch_reference.py: the pipemem GPT written in PyTorch, as a peer to check
the C model against.

It loads a pipemem checkpoint (format in include/pipemem/pm_train.h; parameter
layout in include/pipemem/pm_gpt.h), runs one fixed batch, and writes a small
binary reference file with the batch, the logits, the mean loss, every
parameter's gradient, and the losses of 10 AdamW steps on that same batch with
the checkpoint's hyperparameters (warm-up + cosine schedule, global-norm
clipping, decoupled weight decay on matrices only). tests/test_reference.c
checks the C model against it.

Regenerate the committed file (after a change to the model's init, layout or
numerics) from the repository root:

    make BUILD=build/ref build/ref/tests/test_reference
    build/ref/tests/test_reference --write-ckpt /tmp/pm_ref.ckpt
    /usr/bin/python3 scripts/torch_reference.py /tmp/pm_ref.ckpt tests/data/gpt_reference.bin

Reference file format (little-endian), version 1:
    magic "PMREF001" (8 bytes), version u32 = 1
    vocab, ctx, dim, heads, layers, B, T   (i32 each)
    u64   FNV-1a-64 of the checkpoint's parameter bytes (which model this is)
    i32   tokens (B*T), i32 targets (B*T)
    f32   loss
    f32   logits (B*T*vocab)
    u32   n_steps, then f32 losses (n_steps): loss of each AdamW step's batch
          before that step's update
    u32   n_tensors, then per tensor in slab order:
          u32 name length, name bytes (utf-8, no NUL), u32 numel, f32 grad (numel)
    u64   FNV-1a-64 of every preceding byte
Needs Debian's python3-torch (1.13); run with /usr/bin/python3.
"""
import math
import struct
import sys

import torch
import torch.nn.functional as F

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
N_STEPS = 10
# The fixed batch: bytes of this text, B rows of T+1 consecutive tokens.
BATCH_TEXT = (b"pipemem reference batch. The quick brown fox jumps over the lazy dog; "
              b"0123456789 !?,.-_() {}[] <> @#$%^&* and the rest of a plain sentence.")


def fnv1a64(data, h=FNV_OFFSET):
    """FNV-1a over bytes, vectorised enough for a few hundred KB."""
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def read_ckpt(path):
    raw = open(path, "rb").read()
    if raw[:8] != b"PMCKPT01":
        sys.exit(f"{path}: not a pipemem checkpoint (bad magic)")
    version, hdr = struct.unpack_from("<II", raw, 8)
    if version not in (1, 2) or hdr != 128:
        sys.exit(f"{path}: checkpoint version {version}, this script reads 1 and 2")
    vocab, ctx, dim, heads, layers, batch, micro, steps, warmup = struct.unpack_from("<9i", raw, 16)
    lr, lr_min_frac, beta1, beta2, eps, wd, clip = struct.unpack_from("<7f", raw, 52)
    (n,) = struct.unpack_from("<Q", raw, 112)
    if len(raw) != 128 + 12 * n + 8:
        sys.exit(f"{path}: truncated ({len(raw)} bytes)")
    pbytes = raw[128:128 + 4 * n]
    params = torch.frombuffer(bytearray(pbytes), dtype=torch.float32).clone()
    cfg = dict(vocab=vocab, ctx=ctx, dim=dim, heads=heads, layers=layers, batch=batch,
               micro=micro, steps=steps, warmup=warmup, lr=lr, lr_min_frac=lr_min_frac,
               beta1=beta1, beta2=beta2, eps=eps, wd=wd, clip=clip)
    return cfg, params, pbytes


def tensor_table(cfg):
    """(name, shape, decay) in slab order, exactly pm_gpt_layer_tensors()."""
    V, T, C, L = cfg["vocab"], cfg["ctx"], cfg["dim"], cfg["layers"]
    t = [("wte.weight", (V, C), 0), ("wpe.weight", (T, C), 0)]
    for i in range(L):
        p = f"h.{i}."
        t += [(p + "ln_1.weight", (C,), 0), (p + "ln_1.bias", (C,), 0),
              (p + "attn.c_attn.weight", (3 * C, C), 1), (p + "attn.c_attn.bias", (3 * C,), 0),
              (p + "attn.c_proj.weight", (C, C), 1), (p + "attn.c_proj.bias", (C,), 0),
              (p + "ln_2.weight", (C,), 0), (p + "ln_2.bias", (C,), 0),
              (p + "mlp.c_fc.weight", (4 * C, C), 1), (p + "mlp.c_fc.bias", (4 * C,), 0),
              (p + "mlp.c_proj.weight", (C, 4 * C), 1), (p + "mlp.c_proj.bias", (C,), 0)]
    t += [("ln_f.weight", (C,), 0), ("ln_f.bias", (C,), 0), ("lm_head.weight", (V, C), 1)]
    return t


def unpack(cfg, flat):
    params, off = {}, 0
    for name, shape, _ in tensor_table(cfg):
        n = math.prod(shape)
        params[name] = flat[off:off + n].view(shape).clone().requires_grad_(True)
        off += n
    assert off == flat.numel(), f"layout has {off} floats, checkpoint {flat.numel()}"
    return params


def forward(cfg, P, tok):
    """The GPT of pm_gpt.h: logits (B, T, V)."""
    B, T = tok.shape
    C, H = cfg["dim"], cfg["heads"]
    hs = C // H
    x = P["wte.weight"][tok] + P["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["layers"]):
        p = f"h.{i}."
        h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], 1e-5)
        qkv = F.linear(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"])
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, H, hs).transpose(1, 2)
        k = k.view(B, T, H, hs).transpose(1, 2)
        v = v.view(B, T, H, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + F.linear(y, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], 1e-5)
        h = F.gelu(F.linear(h, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"]),
                   approximate="tanh")
        x = x + F.linear(h, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
    return F.linear(x, P["lm_head.weight"])


def lr_at(cfg, step):
    """pm_lr_at: linear warm-up, then cosine to lr * lr_min_frac."""
    lr, warm, steps = cfg["lr"], cfg["warmup"], cfg["steps"]
    lo = lr * cfg["lr_min_frac"]
    if step < warm:
        return lr * (step + 1) / warm
    span = steps - warm
    if span <= 1:
        return lr
    q = min(1.0, (step - warm) / (span - 1))
    return lo + 0.5 * (lr - lo) * (1.0 + math.cos(math.pi * q))


def batch(cfg):
    B, T = cfg["batch"], cfg["ctx"]
    assert B * (T + 1) <= len(BATCH_TEXT), "batch text too short for this shape"
    rows = [list(BATCH_TEXT[b * (T + 1):(b + 1) * (T + 1)]) for b in range(B)]
    t = torch.tensor(rows, dtype=torch.long)
    return t[:, :T].contiguous(), t[:, 1:].contiguous()


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: torch_reference.py CHECKPOINT OUT.bin")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg, flat, pbytes = read_ckpt(sys.argv[1])
    V = cfg["vocab"]
    tok, tgt = batch(cfg)
    P = unpack(cfg, flat)
    logits = forward(cfg, P, tok)
    loss = F.cross_entropy(logits.view(-1, V), tgt.view(-1))
    loss.backward()
    grads = [(name, P[name].grad.detach().reshape(-1).clone()) for name, _, _ in tensor_table(cfg)]

    # 10 AdamW steps on the same batch, from the checkpoint's parameters.
    P = unpack(cfg, flat)
    table = tensor_table(cfg)
    groups = [{"params": [P[n] for n, _, d in table if d], "weight_decay": cfg["wd"]},
              {"params": [P[n] for n, _, d in table if not d], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                            eps=cfg["eps"])
    losses = []
    for step in range(N_STEPS):
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, step)
        opt.zero_grad()
        lo = F.cross_entropy(forward(cfg, P, tok).view(-1, V), tgt.view(-1))
        lo.backward()
        if cfg["clip"] > 0:
            torch.nn.utils.clip_grad_norm_([P[n] for n, _, _ in table], cfg["clip"])
        opt.step()
        losses.append(lo.item())

    B, T = tok.shape
    out = bytearray(b"PMREF001")
    out += struct.pack("<I", 1)
    out += struct.pack("<7i", V, cfg["ctx"], cfg["dim"], cfg["heads"], cfg["layers"], B, T)
    out += struct.pack("<Q", fnv1a64(pbytes))
    out += struct.pack(f"<{B * T}i", *tok.reshape(-1).tolist())
    out += struct.pack(f"<{B * T}i", *tgt.reshape(-1).tolist())
    out += struct.pack("<f", loss.item())
    out += logits.detach().reshape(-1).numpy().astype("<f4").tobytes()
    out += struct.pack("<I", N_STEPS) + struct.pack(f"<{N_STEPS}f", *losses)
    out += struct.pack("<I", len(grads))
    for name, g in grads:
        nb = name.encode()
        out += struct.pack("<I", len(nb)) + nb + struct.pack("<I", g.numel())
        out += g.numpy().astype("<f4").tobytes()
    out += struct.pack("<Q", fnv1a64(out))
    open(sys.argv[2], "wb").write(out)
    print(f"{sys.argv[2]}: {len(out)} bytes, loss {loss.item():.6f}, "
          f"10-step losses {losses[0]:.4f} .. {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
