# Solutions of 05_fault_tolerance.ipynb (see testbed/exercises.py for the format).

# %% resume
%dist_push steps every
get_ipython().run_cell_magic("dist", "", "%run -i ft_lesson.py")  # the new rank starts empty
%dist_train --name ft-run --steps 24 --checkpoint-every 5 --checkpoint-dir checkpoints/ft-run --resume train()

# %% resume wrong: resumed at once: the replaced rank has neither the variables nor train()
%dist_train --name ft-run --steps 24 --checkpoint-every 5 --checkpoint-dir checkpoints/ft-run --resume train()

# %% resume wrong: brought up to date, then run again without the checkpoint flags: starts at step 0
%dist_push steps every
get_ipython().run_cell_magic("dist", "", "%run -i ft_lesson.py")
%dist_train --name ft-run --steps 24 train()

# %% own-checkpoint
%%dist
def save_checkpoint(folder, model, opt, step):
    state = {"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step,
             "rng": torch.get_rng_state()}  # this rank's own generator: Dropout draws from it
    if device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state()
    final = os.path.join(folder, f"rank{rank}.pt")
    torch.save(state, final + ".tmp")
    os.replace(final + ".tmp", final)  # a crash mid-write leaves no half file under the real name

def load_checkpoint(folder, model, opt):
    state = torch.load(os.path.join(folder, f"rank{rank}.pt"), weights_only=False)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    torch.set_rng_state(state["rng"])
    if "cuda_rng" in state:
        torch.cuda.set_rng_state(state["cuda_rng"])
    return state["step"] + 1  # step was trained before the save

# %% own-checkpoint wrong: the model's weights only (the optimizer's momentum starts again from zero)
%%dist
def save_checkpoint(folder, model, opt, step):
    torch.save({"model": model.module.state_dict(), "step": step, "rng": torch.get_rng_state()},
               os.path.join(folder, f"rank{rank}.pt"))

def load_checkpoint(folder, model, opt):
    state = torch.load(os.path.join(folder, f"rank{rank}.pt"), weights_only=False)
    model.module.load_state_dict(state["model"])
    torch.set_rng_state(state["rng"])
    return state["step"] + 1

# %% own-checkpoint wrong: weights and optimizer, but not the random generator (Dropout draws differently)
%%dist
def save_checkpoint(folder, model, opt, step):
    torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step},
               os.path.join(folder, f"rank{rank}.pt"))

def load_checkpoint(folder, model, opt):
    state = torch.load(os.path.join(folder, f"rank{rank}.pt"), weights_only=False)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"] + 1

# %% own-checkpoint wrong: one file from rank 0, as for the weights, so every rank gets rank 0's generator
%%dist
def save_checkpoint(folder, model, opt, step):
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step,
                    "rng": torch.get_rng_state()}, os.path.join(folder, "checkpoint.pt"))
    dist.barrier()

def load_checkpoint(folder, model, opt):
    state = torch.load(os.path.join(folder, "checkpoint.pt"), weights_only=False)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    torch.set_rng_state(state["rng"])
    return state["step"] + 1

# %% own-checkpoint wrong: returns the saved step itself, so step 6 is trained twice
%%dist
def save_checkpoint(folder, model, opt, step):
    state = {"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step,
             "rng": torch.get_rng_state()}
    torch.save(state, os.path.join(folder, f"rank{rank}.pt"))

def load_checkpoint(folder, model, opt):
    state = torch.load(os.path.join(folder, f"rank{rank}.pt"), weights_only=False)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    torch.set_rng_state(state["rng"])
    return state["step"]
