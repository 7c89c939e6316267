"""The paper's published numbers (Shen et al., IJCAI 2019), for comparison only.

Accuracies in percent, as printed in Tables 1 and 2 (final best test accuracy, 16 workers); the
speedups are the text's "almost 2x and 2.5x" (homogeneous, Figure 3) and "almost 2.5x and 3x"
(heterogeneous, Figure 6) of CoCoD-SGD over S-SGD, for ResNet18 and VGG16.
"""

TASKS = ('c10_r18', 'c10_v16', 'c100_r18', 'c100_v16')

TABLE1 = {
  'ssgd': (94.00, 93.25, 75.08, 70.81),
  'pipe_sgd': (93.94, 93.09, 75.13, 70.59),
  'local_sgd': (94.35, 93.30, 75.42, 71.13),
  'cocod_sgd': (94.41, 93.38, 75.67, 72.24),
}

TABLE2 = {
  'ssgd': (94.18, 93.09, 74.30, 70.51),
  'ssgd+ps': (93.73, 92.96, 74.16, 70.32),
  'pipe_sgd': (94.17, 92.36, 73.95, 70.26),
  'pipe_sgd+ps': (94.10, 92.71, 73.84, 70.15),
  'asynlocal_sgd': (94.47, 93.24, 75.21, 71.80),
  'cocod_sgd+ps': (94.33, 92.69, 75.74, 71.33),
}

# CoCoD-SGD's time-to-accuracy speedup over S-SGD by model (ResNet18, VGG16).
SPEEDUP = {
  'homogeneous': {'resnet18': 2.0, 'vgg16': 2.5},
  'heterogeneous': {'resnet18': 2.5, 'vgg16': 3.0},
}

NAMES = {
  'ssgd': 'S-SGD',
  'ssgd+ps': 'S-SGD+PS',
  'pipe_sgd': 'Pipe-SGD',
  'pipe_sgd+ps': 'Pipe-SGD+PS',
  'local_sgd': 'Local-SGD',
  'asynlocal_sgd': 'AsynLocal-SGD',
  'cocod_sgd': 'CoCoD-SGD',
  'cocod_sgd+ps': 'CoCoD-SGD+PS',
}


def accuracy(table: dict, algo: str, task: str) -> float:
  """The paper's accuracy (%) of `algo` on `task` in `table` (TABLE1 or TABLE2)."""
  return table[algo][TASKS.index(task)]
