# Solutions of 17_fault_tolerant_training.ipynb (see the exercise format in the notebooks' README).

# %% save-resume
%%writefile {work}/checkpointing.py
# Save and resume for elastic_train.py: torchrun starts it again from the top after a failure.
import os

import torch


def save_checkpoint(folder, step, model, opt):
    """On rank 0 after step `step`: write model, optimizer and step into `folder`, atomically."""
    path = os.path.join(folder, f"step-{step:06d}.pt")
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)      # atomic: under its final name the file is whole or absent


def resume(folder, model, opt):
    """On every rank: load the latest checkpoint in `folder`, return the next step (0 if none)."""
    names = sorted(n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".pt"))
    if not names:
        return 0
    state = torch.load(os.path.join(folder, names[-1]))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"] + 1

# %% save-resume right: one file, latest.pt, replaced atomically through a NamedTemporaryFile
%%writefile {work}/checkpointing.py
import os
import tempfile

import torch


def save_checkpoint(folder, step, model, opt):
    with tempfile.NamedTemporaryFile(dir=folder, suffix=".part", delete=False) as f:
        torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, f)
    os.replace(f.name, os.path.join(folder, "latest.pt"))


def resume(folder, model, opt):
    path = os.path.join(folder, "latest.pt")
    if not os.path.exists(path):
        return 0
    state = torch.load(path)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"] + 1

# %% save-resume right: unpadded step numbers, the latest found by its number, os.rename
%%writefile {work}/checkpointing.py
import os
import re

import torch


def save_checkpoint(folder, step, model, opt):
    tmp = os.path.join(folder, f"ckpt-{step}.pt.partial")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, tmp)
    os.rename(tmp, os.path.join(folder, f"ckpt-{step}.pt"))


def resume(folder, model, opt):
    steps = [int(m.group(1)) for n in os.listdir(folder) if (m := re.fullmatch(r"ckpt-(\d+)\.pt", n))]
    if not steps:
        return 0
    state = torch.load(os.path.join(folder, f"ckpt-{max(steps)}.pt"))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return max(steps) + 1

# %% save-resume wrong: checkpoints saved but never loaded: every attempt starts again at step 0
%%writefile {work}/checkpointing.py
import os

import torch


def save_checkpoint(folder, step, model, opt):
    path = os.path.join(folder, f"step-{step:06d}.pt")
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def resume(folder, model, opt):
    return 0

# %% save-resume wrong: torch.save straight to the final name: the kill leaves a torn file there
%%writefile {work}/checkpointing.py
import os

import torch


def save_checkpoint(folder, step, model, opt):
    path = os.path.join(folder, f"step-{step:06d}.pt")
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, path)


def resume(folder, model, opt):
    names = sorted(n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".pt"))
    if not names:
        return 0
    state = torch.load(os.path.join(folder, names[-1]))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"] + 1

# %% save-resume wrong: returns the saved step: that step is trained a second time
%%writefile {work}/checkpointing.py
import os

import torch


def save_checkpoint(folder, step, model, opt):
    path = os.path.join(folder, f"step-{step:06d}.pt")
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def resume(folder, model, opt):
    names = sorted(n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".pt"))
    if not names:
        return 0
    state = torch.load(os.path.join(folder, names[-1]))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"]

# %% save-resume wrong: unpadded names sorted as strings: 'step-9.pt' comes after 'step-14.pt'
%%writefile {work}/checkpointing.py
import os

import torch


def save_checkpoint(folder, step, model, opt):
    path = os.path.join(folder, f"step-{step}.pt")
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def resume(folder, model, opt):
    names = sorted(n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".pt"))
    if not names:
        return 0
    state = torch.load(os.path.join(folder, names[-1]))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"] + 1

# %% save-resume wrong: the model only: the resumed run has lost SGD's momentum
%%writefile {work}/checkpointing.py
import os

import torch


def save_checkpoint(folder, step, model, opt):
    path = os.path.join(folder, f"step-{step:06d}.pt")
    torch.save({"step": step, "model": model.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def resume(folder, model, opt):
    names = sorted(n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".pt"))
    if not names:
        return 0
    state = torch.load(os.path.join(folder, names[-1]))
    model.load_state_dict(state["model"])
    return state["step"] + 1

# %% save-resume wrong: only rank 0, which wrote the checkpoint, loads it: rank 1 starts at 0
%%writefile {work}/checkpointing.py
import os

import torch
import torch.distributed as dist


def save_checkpoint(folder, step, model, opt):
    path = os.path.join(folder, f"step-{step:06d}.pt")
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def resume(folder, model, opt):
    names = sorted(n for n in os.listdir(folder) if n.startswith("step-") and n.endswith(".pt"))
    if dist.get_rank() != 0 or not names:
        return 0
    state = torch.load(os.path.join(folder, names[-1]))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"] + 1
