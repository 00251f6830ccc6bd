"""save_npz: write a dict of arrays as an uncompressed .npz, whatever the keys.

np.savez(path, **arrays) loses an entry whose key is a keyword that NumPy's own
dispatch takes (Debian's NumPy 1.24 swallows `like`, the ONNX CastLike tests' input
name), so every tool and test that saves arrays keyed by model names uses this.
"""

import zipfile

import numpy as np


def save_npz(path, arrays):
    """Write arrays ({name: array}) to path as NAME.npy entries of a stored zip."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, value in arrays.items():
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(value), allow_pickle=False)
