# Solutions of 15_distributed_checkpoints.ipynb (see the exercise format in the notebooks' README).

# %% checkpoint
%%dist
def save_checkpoint(folder, model, opt, step):
    # Save the model's and optimizer's state (get_state_dict) and the step with dcp.save.
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd, "step": step}, checkpoint_id=folder)

def load_checkpoint(folder, model, opt):
    # Load into this model and optimizer (get_state_dict, dcp.load, set_state_dict); return the step.
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd, "step": -1}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return state["step"]

# %% checkpoint wrong: the model only: a fresh Adam on resume takes other steps
%%dist
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

def save_checkpoint(folder, model, opt, step):
    dcp.save({"model": get_model_state_dict(model), "step": step}, checkpoint_id=folder)

def load_checkpoint(folder, model, opt):
    state = {"model": get_model_state_dict(model), "step": -1}
    dcp.load(state, checkpoint_id=folder)
    set_model_state_dict(model, state["model"])
    return state["step"]

# %% checkpoint wrong: the model's and optimizer's own state_dict(): DDP's names start with 'module.' and Adam's number the parameters
%%dist
def save_checkpoint(folder, model, opt, step):
    dcp.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step}, checkpoint_id=folder)

def load_checkpoint(folder, model, opt):
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": -1}
    dcp.load(state, checkpoint_id=folder)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    return state["step"]

# %% checkpoint wrong: the step not saved: the resumed run restarts its count at 0
%%dist
def save_checkpoint(folder, model, opt, step):
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=folder)

def load_checkpoint(folder, model, opt):
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return 0

# %% interval
def checkpoint_interval(save_s, mtbf_s):
    # The checkpoint interval (s) that minimises delta/tau + tau/(2M).
    return math.sqrt(2 * save_s * mtbf_s)

# %% interval right: Daly's higher-order estimate, sqrt(2 delta M) - delta
def checkpoint_interval(save_s, mtbf_s):
    return math.sqrt(2 * save_s * mtbf_s) - save_s

# %% interval wrong: sqrt(delta M), the factor 2 forgotten
def checkpoint_interval(save_s, mtbf_s):
    return math.sqrt(save_s * mtbf_s)

# %% interval wrong: half the MTBF, whatever the save costs
def checkpoint_interval(save_s, mtbf_s):
    return mtbf_s / 2

# %% interval wrong: the MTBF over the save time (a ratio, not a time)
def checkpoint_interval(save_s, mtbf_s):
    return mtbf_s / save_s
