# Solutions of 19_compile_and_fp8.ipynb (see the exercise format in the notebooks' README).

# %% fp8
%%dist
def to_fp8(x):
    # (x8, scale): x8 = x * scale in float8_e4m3fn, the largest |x| mapped to 448.
    amax = x.abs().max().float().clamp(min=1e-12)      # an all-zero tensor keeps a finite scale
    scale = torch.finfo(torch.float8_e4m3fn).max / amax
    return (x * scale).to(torch.float8_e4m3fn), scale

# %% fp8 right: a power-of-two scale (exact to apply and undo; the largest value lands in 224-448)
%%dist
def to_fp8(x):
    amax = x.abs().max().float().clamp(min=1e-12)
    scale = torch.exp2(torch.floor(torch.log2(448.0 / amax)))
    return (x * scale).to(torch.float8_e4m3fn), scale

# %% fp8 right: a scale per row (rowwise scaling, finer than per tensor)
%%dist
def to_fp8(x):
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
    scale = 448.0 / amax
    return (x * scale).to(torch.float8_e4m3fn), scale

# %% fp8 wrong: no scale: small tensors underflow to 0, large ones saturate at 448
%%dist
def to_fp8(x):
    return x.to(torch.float8_e4m3fn), torch.tensor(1.0)

# %% fp8 wrong: scaled to [-1, 1]: values far below the largest fall under E4M3's smallest normal
%%dist
def to_fp8(x):
    scale = 1.0 / x.abs().max().clamp(min=1e-12)
    return (x * scale).to(torch.float8_e4m3fn), scale

# %% fp8 wrong: E5M2 (the gradients' format, one mantissa bit less)
%%dist
def to_fp8(x):
    scale = torch.finfo(torch.float8_e5m2).max / x.abs().max().clamp(min=1e-12)
    return (x * scale).to(torch.float8_e5m2), scale

# %% fp8 wrong: the inverse returned as the scale (amax / 448: what _scaled_mm takes, not what was multiplied by)
%%dist
def to_fp8(x):
    amax = x.abs().max().clamp(min=1e-12)
    return (x * (448.0 / amax)).to(torch.float8_e4m3fn), amax / 448.0

# %% fp8 wrong: amax not guarded: an all-zero tensor gets an infinite scale and NaNs
%%dist
def to_fp8(x):
    scale = 448.0 / x.abs().max()
    return (x * scale).to(torch.float8_e4m3fn), scale
