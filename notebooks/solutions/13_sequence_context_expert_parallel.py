# Solutions of notebook 13 (sequence, context and expert parallelism). Each section replaces
# the exercise cell it names; "wrong:" sections are plausible mistakes the check must reject.

# %% merge
import torch


def merge(out_a, lse_a, out_b, lse_b):
    """Attention over blocks a and b from the attention over each: (out, lse)."""
    lse = torch.logaddexp(lse_a, lse_b)  # log(exp(lse_a) + exp(lse_b)), without overflow
    return torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b, lse


# %% merge wrong: the two outputs averaged, as if every block held half the attention
import torch


def merge(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)


# %% merge wrong: the right weights from exp(lse) directly, which overflows on large scores
import torch


def merge(out_a, lse_a, out_b, lse_b):
    wa, wb = torch.exp(lse_a), torch.exp(lse_b)
    return (wa * out_a + wb * out_b) / (wa + wb), torch.log(wa + wb)


# %% merge wrong: the output weighted right, the merged lse taken as the larger of the two
import torch


def merge(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    out = torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b
    return out, torch.maximum(lse_a, lse_b)


# %% merge wrong: the outputs added, each block's softmax being normalised already
import torch


def merge(out_a, lse_a, out_b, lse_b):
    return out_a + out_b, torch.logaddexp(lse_a, lse_b)
