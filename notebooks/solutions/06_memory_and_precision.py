# Solutions to the exercises of 06_memory_and_precision.ipynb, and plausible wrong answers the checks reject.

# %% state_bytes
def state_bytes_per_param(optimizer):
    # 4 bytes each: the weight, its gradient, and one (momentum) or two (Adam) state tensors
    return {"sgd": 8, "momentum": 12, "adam": 16}[optimizer]


# %% state_bytes wrong: forgets the gradient
def state_bytes_per_param(optimizer):
    return {"sgd": 4, "momentum": 8, "adam": 12}[optimizer]


# %% state_bytes wrong: Adam keeps one state tensor, not two
def state_bytes_per_param(optimizer):
    return {"sgd": 8, "momentum": 12, "adam": 12}[optimizer]


# %% loss_scale
import math

import torch


def loss_scale(min_grad, max_grad):
    tiny = torch.finfo(torch.float16).tiny  # 2**-14, the smallest normal float16
    top = torch.finfo(torch.float16).max  # 65504
    lift = 2.0 ** max(0, math.ceil(math.log2(tiny / min_grad)))  # smallest scale lifting min_grad
    safe = 2.0 ** math.floor(math.log2(top / max_grad))  # largest scale that does not overflow
    return min(lift, safe)


# %% loss_scale wrong: lifts the smallest gradient and ignores the largest, which then overflows
import math

import torch


def loss_scale(min_grad, max_grad):
    tiny = torch.finfo(torch.float16).tiny
    return 2.0 ** max(0, math.ceil(math.log2(tiny / min_grad)))


# %% loss_scale wrong: always GradScaler's initial 2**16
def loss_scale(min_grad, max_grad):
    return 2.0**16


# %% loss_scale wrong: aims at float16's smallest subnormal, not its normal range
import math


def loss_scale(min_grad, max_grad):
    safe = 2.0 ** math.floor(math.log2(65504 / max_grad))
    return min(2.0 ** max(0, math.ceil(math.log2(2.0**-24 / min_grad))), safe)


# %% loss_scale wrong: rounds the exponent down, which leaves the smallest gradient just below 2**-14
import math


def loss_scale(min_grad, max_grad):
    safe = 2.0 ** math.floor(math.log2(65504 / max_grad))
    return min(2.0 ** max(0, math.floor(math.log2(2.0**-14 / min_grad))), safe)


# %% loss_scale wrong: no scaling (1) where the window is empty, though larger scales do not overflow
import math


def loss_scale(min_grad, max_grad):
    lift = 2.0 ** max(0, math.ceil(math.log2(2.0**-14 / min_grad)))
    return lift if max_grad * lift <= 65504 else 1.0


# %% loss_scale right: the largest scale that does not overflow, where GradScaler's growth settles
import math


def loss_scale(min_grad, max_grad):
    return 2.0 ** math.floor(math.log2(65504 / max_grad))
