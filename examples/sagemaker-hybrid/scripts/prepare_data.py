"""Data preparation: scikit-learn's digits (shipped in its wheel, no download) split into train and held-out sets.

Writes ``train.npz`` and ``test.npz`` (raw 8x8 images, values 0..16, and labels) under ``--out``. The
preprocessing itself is in ``preprocess.py``, shared by training and serving.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("DATA_DIR", "data")))
    parser.add_argument("--test-size", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.images.astype(np.uint8), digits.target.astype(np.int64), test_size=args.test_size,
        random_state=args.seed, stratify=digits.target)
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out / "train.npz", images=x_train, labels=y_train)
    np.savez_compressed(args.out / "test.npz", images=x_test, labels=y_test)
    print(f"wrote {len(y_train)} training and {len(y_test)} held-out digits to {args.out}")


if __name__ == "__main__":
    main()
