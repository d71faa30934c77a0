"""Convert the raw Planetoid Cora files once into datasets/planetoid/cora.npz.

Run from the repository root:

    .venv/bin/python datasets/convert_planetoid.py --raw ../shared/data/planetoid

The conversion uses setattn's pickle-free decoder (``setattn.datasets.convert_planetoid``).
As a cross-check, the trusted raw files are then unpickled the ordinary way (with
SciPy, if it is installed), assembled independently, and compared with the .npz.
The library itself never unpickles; only this one-off script does.
"""

from __future__ import annotations

import argparse
import pickle
import warnings
from pathlib import Path

import numpy as np

from setattn.datasets import convert_planetoid, load_planetoid

HERE = Path(__file__).resolve().parent


def reference_arrays(raw_root: Path, name: str) -> dict[str, np.ndarray]:
    """Assemble the set with plain pickle + SciPy, as the original Planetoid code did."""
    parts = {}
    for part in ("x", "y", "tx", "ty", "allx", "ally", "graph"):
        with open(raw_root / f"ind.{name}.{part}", "rb") as handle, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # old scipy.sparse.csr path
            parts[part] = pickle.load(handle, encoding="latin1")  # trusted input, once
    test_index = np.loadtxt(raw_root / f"ind.{name}.test.index", dtype=np.int64)
    test_sorted = np.sort(test_index)
    features = np.vstack([parts["allx"].toarray(), parts["tx"].toarray()])
    labels = np.vstack([parts["ally"], parts["ty"]])
    features[test_index] = features[test_sorted]
    labels[test_index] = labels[test_sorted]
    edges = {(u, v) for u, nbrs in parts["graph"].items() for v in nbrs if u != v}
    edges |= {(v, u) for u, v in edges}
    return {
        "x": features.astype(np.float32),
        "y": labels.argmax(1),
        "edge_index": np.array(sorted(edges, key=lambda e: (e[1], e[0])), dtype=np.int64).T,
        "num_train": np.array(parts["x"].shape[0]),
        "test_index": test_sorted,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", type=Path, default=HERE.parent.parent / "shared/data/planetoid")
    parser.add_argument("--name", default="cora")
    parser.add_argument("--out", type=Path, default=HERE / "planetoid")
    args = parser.parse_args()

    out = convert_planetoid(args.raw, args.name, args.out / f"{args.name}.npz")
    data = load_planetoid(args.out, args.name)
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB): {data}")

    try:
        import scipy.sparse  # noqa: F401  (needed to unpickle the reference)
    except ImportError:
        print("SciPy not installed: skipped the cross-check against plain pickle")
        return
    ref = reference_arrays(args.raw, args.name)
    assert np.array_equal(data.x.numpy(), ref["x"]), "features differ"
    assert np.array_equal(data.y.numpy(), ref["y"]), "labels differ"
    assert np.array_equal(data.edge_index.numpy(), ref["edge_index"]), "edges differ"
    assert int(data.train_mask.sum()) == int(ref["num_train"]), "train split differs"
    assert np.array_equal(data.test_mask.nonzero().view(-1).numpy(), ref["test_index"])
    print("cross-check against plain pickle + SciPy: identical")


if __name__ == "__main__":
    main()
