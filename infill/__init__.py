"""infill: code and text infilling with lossless parallel decoding.

Keep this module free of heavy imports: `infill --help` must not import torch or transformers.
"""

__version__ = "0.1.0"
