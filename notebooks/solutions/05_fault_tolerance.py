# Solutions of 05_fault_tolerance.ipynb (see tests/notebooks/exercises.py for the format).

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
