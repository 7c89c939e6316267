"""The small sets that ship with the code: scikit-learn's digits and the generated clusters100
(the quickstart's, the tests' and Figure 4's at the cpu scale)."""

import numpy as np

from cocod_jax.data.dataset import split_features


def load_digits():
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top

  d = load_digits()  # 1797 8x8 images bundled with scikit-learn: no network needed.
  x = (d.images / 16.0).astype(np.float32)[..., None]
  y = d.target.astype(np.int32)
  perm = np.random.RandomState(0).permutation(len(x))  # The fixed train/test split.
  return split_features(x[perm], y[perm], 1500, num_classes=10)


def load_clusters100(classes=100, train=3000, test=1000):
  """100 classes of 8x8 single-channel images, the same on every machine (seed 0): each class
  is a random 3x3 texture tiled over the image, an example its class's texture plus Gaussian
  noise of 0.5 a pixel. The CPU-scale stand-in for CIFAR-100: as many classes, on digits-sized
  inputs, that both a convolution (local texture) and an MLP (pixels) can learn, neither to
  100%."""
  rs = np.random.RandomState(0)
  textures = rs.rand(classes, 3, 3)
  prototypes = np.tile(textures, (1, 3, 3))[:, :8, :8, None]  # [classes, 8, 8, 1]
  y = np.concatenate([np.arange(classes)] * ((train + test) // classes))
  y = y[rs.permutation(len(y))].astype(np.int32)
  x = (prototypes[y] + 0.5 * rs.randn(len(y), 8, 8, 1)).astype(np.float32)
  return split_features(x, y, train, num_classes=classes)
