"""memsnap: GPU memory made understandable.

``memsnap.torch`` makes memsnap's caching allocator PyTorch's CUDA allocator; the ``memsnap``
command-line viewer reads the snapshots it writes (and PyTorch's own).
"""

__version__ = "0.1.0"
