# Sourced by the GPU machine's scripts (gpu.sh, gpu_notebooks.sh), from the repository's
# root: the packages torch's image lacks come from wheels carried in .whl/ (see
# bench/README.md), installed into /tmp/site, which PYTHONPATH puts first.
if [ -d .whl ]; then
  "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"${PYTHON:-python3}" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
