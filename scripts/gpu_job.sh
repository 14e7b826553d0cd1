#!/usr/bin/env bash
# One GPU loan, one call: from the checkout's root, with nothing installed but torch, transformers, tokenizers,
# safetensors, numpy and click. Writes what comes back to $OUT (docs/training.md, "A GPU loan in one call").
#   scripts/gpu_job.sh            # the full job (9 minutes on one GPU)
#   scripts/gpu_job.sh --smoke    # the same stages on the CPU with tiny settings
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec python3 -m infill train gpu-job "$@"
