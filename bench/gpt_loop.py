"""A GPT-small-sized training loop (124M parameters, bf16) for the GPU benchmark.

Runs the same way in a ``%%dist_train`` cell and under torchrun: it uses the default
process group when one exists and creates it from the environment otherwise.

    torchrun --nproc-per-node 1 bench/gpt_loop.py
"""

import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CTX, WIDTH, LAYERS, HEADS = 50257, 1024, 768, 12, 12
BATCH, WARMUP, STEPS = 8, 10, 80
H200_BF16_PEAK = 989e12  # dense bf16 FLOP/s


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(
            nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)
        )

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, c // HEADS).unbind(2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CTX, WIDTH)
        self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
        self.ln, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def train_gpt(report=None):
    if not dist.is_initialized():
        dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(0 if os.environ.get("CUDA_VISIBLE_DEVICES") else rank)
    torch.manual_seed(0)
    model = GPT().cuda()
    params = sum(p.numel() for p in model.parameters())
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4, fused=True)
    data = torch.randint(0, VOCAB, (BATCH, CTX + 1), device="cuda")
    start = None
    for step in range(WARMUP + STEPS):
        if step == WARMUP:
            torch.cuda.synchronize()
            start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = ddp(data[:, :-1])
            loss = F.cross_entropy(logits.view(-1, VOCAB).float(), data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if report is not None:
            # .item() would wait for the GPU every step; send the step only, loss every 10.
            report(step=step, samples=BATCH, **({"loss": loss} if step % 10 == 0 else {}))
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    samples_per_s = STEPS * BATCH / seconds
    flops = 6 * params * BATCH * CTX * STEPS / seconds
    return {
        "params": params,
        "samples_per_s": samples_per_s,
        "tokens_per_s": samples_per_s * CTX,
        "mfu": flops / H200_BF16_PEAK,
        "step_ms": 1000 * seconds / STEPS,
    }


if __name__ == "__main__":
    result = train_gpt()
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(result))
    dist.destroy_process_group()
