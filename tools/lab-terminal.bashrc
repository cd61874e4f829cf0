# The rc file of a bash terminal opened in `make lab`'s JupyterLab: the user's own
# ~/.bashrc, then the project's virtual environment activated (VIRTUAL_ENV, set by
# `make lab`), so `python` and `torchrun` as %dist_export prints them are the
# environment's even where ~/.bashrc puts other folders first on PATH.
# shellcheck disable=SC1090,SC1091
[ -f ~/.bashrc ] && . ~/.bashrc
[ -n "${VIRTUAL_ENV:-}" ] && [ -f "$VIRTUAL_ENV/bin/activate" ] && . "$VIRTUAL_ENV/bin/activate"
