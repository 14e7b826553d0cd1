"""`python -m infill.models.onnx_make FOLDER [--int8]`: make the cached ONNX graph of the AS-ARM in model folder
FOLDER (infill.models.onnx.graph_file), as a long-lived process asks for it in the background
(infill.models.onnx.make_elsewhere). Exit 0 when the graph is in the cache, 1 otherwise."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from pathlib import Path

    from infill.config import ModelSpec
    from infill.models import onnx
    from infill.models.loading import load_xlnet_folder, read_config

    folder, int8 = Path(argv[0]), "--int8" in argv[1:]
    spec = ModelSpec(name=str(folder), engine="torch", bf16=False)
    net = load_xlnet_folder(folder, spec, read_config(folder), "").asarm.net  # type: ignore[attr-defined]
    onnx.graph_file(net, int8)
    return 0 if onnx.graph_ready(net, int8) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
