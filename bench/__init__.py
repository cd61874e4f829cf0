"""The benchmarks of dist-notebook against its peers, as one harness.

    python -m bench list                   # every benchmark: what it measures, against what
    python -m bench run NAME [ARGS...]     # one of them (its registered arguments, then ARGS)
    python -m bench run --quick NAME       # a smoke run, into a scratch folder
    python -m bench run --all              # the parts of bench/results/README.md (make bench)

Run from the repository's root. The registry is ``bench/registry.py``; shared set-up is
``bench/common.py``; results go to ``bench/results/``, which the docs include.
"""
