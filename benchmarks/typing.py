"""`python benchmarks/typing.py`: typing through `infill lsp` as an editor would (the benchmark is
benchmarks/typing_replay.py; its options: --help).

The benchmark is asked for under this name, and a file of this name in a script's folder stands for the
standard library's `typing` module for every script of the folder (the folder comes first on the path). So it is
two things: run as a script, it runs the benchmark; imported as `typing` (by any script here, this one's
benchmark included), it puts the standard library's module in its place.
"""

import importlib
import os
import sys

if __name__ == "__main__":
    from typing_replay import main

    main()
elif __name__ == "typing":
    _here = os.path.dirname(os.path.abspath(__file__))
    _path = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    try:
        del sys.modules[__name__]
        sys.modules[__name__] = importlib.import_module(__name__)  # what `import typing` now gets
    finally:
        sys.path[:] = _path
