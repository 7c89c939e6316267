"""The run's schema and defaults: every field of a run's config, with the paper's values.

Every config file builds on `base_config` (configs/*.py through configs/common.py, which hands
these names on); the library reads the schema here (config/loader.py checks a config against it,
record/schema.py reads BACKENDS), so that it never imports configs/. Other tools drive the binary
through these names. describe.py holds each field's line.
"""

import ml_collections
from ml_collections import config_dict

# The names of `config.backend`: `one_host` (cluster/one_host.py) and `mpi` (cluster/ranks.py).
BACKENDS = ('one_host', 'mpi')


def base_config() -> ml_collections.ConfigDict:
  """The paper's Section 5 hyperparameters; each experiment file overrides what differs."""
  c = ml_collections.ConfigDict()
  c.algorithm = ml_collections.ConfigDict()
  c.algorithm.name = 'cocod_sgd'
  # k, or 'auto': measured at the start of an MPI run (cocod_jax/cluster/period_auto.py). Typed
  # `object` so that `--config.algorithm.period=auto` and `=8` both parse (8 as an int); validated
  # there.
  c.algorithm.period = config_dict.FieldReference(5, field_type=object)
  c.algorithm.warmup_period_epochs = 10
  c.algorithm.average_batch_stats = True
  c.algorithm.average_momentum = False
  # CoCoD-SGD's correction when a round's average arrives (cocod_jax/algorithms/correction.py):
  # 'cocod' (the paper's), 'reset', 'blend' (alpha: the local model's share), 'outer_sgd'
  # (DiLoCo's).
  c.algorithm.correction = 'cocod'
  c.algorithm.alpha = 0.0
  c.algorithm.outer_lr = 0.7
  c.algorithm.outer_momentum = 0.9
  c.algorithm.outer_nesterov = True
  # 'eager' (Kale et al. 2025, exact progress accounting): the weight of a worker's own fresh
  # progress and the extrapolation of the others'; 1 and 0 are 'cocod'.
  c.algorithm.eager_lambda = 1.0
  c.algorithm.eager_gamma = 0.0
  # 'anchor' (Overlap Local-SGD, Wang, Liang & Joshi 2020): the pull towards the anchor, and the
  # anchor's momentum.
  c.algorithm.anchor_pull = 0.6
  c.algorithm.anchor_momentum = 0.7
  # CoCoD-SGD's snapshot is taken `delay` steps before the round's end (tau, 1 <= tau <= k);
  # None: at the round's start (tau = k, the paper's); 'auto': the smallest tau with tau Tp >= Tc,
  # measured at the start of an MPI run as for period='auto'. Typed `object`: None, an integer
  # or 'auto'. With period='auto', a tau larger than the measured k acts as k.
  c.algorithm.delay = config_dict.FieldReference(None, field_type=object)
  # Streamed CoCoD-SGD: the synced part cut into P contiguous fragments, one fragment's snapshot
  # allreduce a step, each corrected `delay` steps after its snapshot (tau; default 1 with P > 1);
  # 1: the paper's whole-model allreduce (cocod_jax/algorithms/streamed.py).
  c.algorithm.fragments = 1
  c.backend = 'one_host'  # All workers in one process; 'mpi': R ranks of N / R (mpirun/srun).
  c.one_host = ml_collections.ConfigDict()  # The one-host cluster (backend='one_host' only).
  c.one_host.devices = 0  # Devices the workers are sharded over; 0: the most that divide N.
  c.mpi = ml_collections.ConfigDict()  # The ranks (backend='mpi' only): num_workers / R each.
  c.mpi.workers_per_rank = 0  # W; 0: num_workers / the job's ranks. Launchers read it.
  c.mpi.devices = 0  # Local devices each rank shards its workers over; 0: the most that divide W.
  c.comm = ml_collections.ConfigDict()  # The communicator (the fields below dtype: MPI only).
  # CoCoD-SGD's snapshot allreduce: the type its values travel in, and whether what rounding
  # loses is added to the next round's snapshot (error feedback).
  c.comm.dtype = 'float32'
  c.comm.error_feedback = False
  c.comm.threaded = True  # Collectives on a background thread (False: synchronous, for tests).
  c.comm.staging = 'host'  # Where the allreduce runs: 'host' (mpi4py) or 'device' (mpi4jax).
  c.comm.timeout_s = 600.0  # A collective slower than this ends the job on every rank.
  c.timeline = ml_collections.ConfigDict()  # Measured spans (backend='mpi' only).
  c.timeline.sample_every = 10  # Time every n-th round (1: every round, 0: none).
  c.num_workers = 16
  c.model = ml_collections.ConfigDict()
  c.model.name = 'resnet18'
  c.dataset = ml_collections.ConfigDict()
  c.dataset.name = 'cifar10'
  c.dataset.path = ''  # The .npz file of dataset.name='npz'.
  c.dataset.shuffle = True
  c.dataset.augment = True
  c.dataset.num_classes = 0  # 0: from the data.
  c.dataset.train_examples = 0  # MNIST-1D: examples generated for training; 0: the variant's.
  c.dataset.test_examples = 0  # MNIST-1D: examples generated for testing; 0: the variant's.
  c.data_dir = ''  # TFDS data dir (CIFAR); '': $TFDS_DATA_DIR, else ~/tensorflow_datasets.
  c.batch_size = 32
  c.worker_speeds = ()  # C_i of each worker (heterogeneous clusters); empty: all equal.
  c.proportional_sampling = False  # Batch M_i and shard proportional to C_i (PS).
  c.emulate_speeds = False  # MPI: slow worker i down to C_i / C_max of its speed (time only).
  c.optimizer = ml_collections.ConfigDict()
  c.optimizer.name = 'sgd'  # 'adam': only for rerunning MNIST-1D's published recipe.
  c.optimizer.learning_rate = 0.01
  c.optimizer.momentum = 0.9
  c.optimizer.weight_decay = 1e-4
  c.optimizer.lr_scaling = 'linear'
  c.optimizer.warmup_epochs = 5.0
  c.optimizer.decay_epochs = (81,)
  c.optimizer.decay_factor = 0.1
  c.checkpoint = ml_collections.ConfigDict()  # workdir/checkpoints; a rerun resumes from there.
  c.checkpoint.every_epochs = 5  # After every n-th epoch and the last one (0: not by epochs).
  c.checkpoint.interval_s = 1800.0  # Also when this much time passed since the last (0: never).
  c.checkpoint.keep = 2  # Committed checkpoints kept.
  c.checkpoint.preempt_deadline_s = 90.0  # After a SIGTERM, exit at once if not done by then.
  c.num_epochs = 120
  c.seed = 0
  # > 0: each epoch (and at the end) the evaluated model's loss and accuracy on the first n
  # training examples too (avg_train_loss, avg_train_accuracy); train_loss is the workers' own.
  c.eval_train_examples = 0
  return c


def small_config(model: str, dataset: str, num_workers: int, batch_size: int, num_epochs: int):
  """A run that fits a CPU (the tests, the quickstart, the benchmarks): the base config on
  `dataset` without augmentation (8x8 digits and feature vectors have no crops or flips), no
  warm-up of the learning rate or the period (a few epochs leave no room for one)."""
  c = base_config()
  c.model.name, c.dataset.name = model, dataset
  c.dataset.augment = False
  c.num_workers, c.batch_size, c.num_epochs = num_workers, batch_size, num_epochs
  c.algorithm.warmup_period_epochs = 0
  c.optimizer.warmup_epochs = 0
  return c


def without_checkpoints(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """No checkpoints at all: for runs whose only product is their results or timings."""
  c.checkpoint.every_epochs = 0
  c.checkpoint.interval_s = 0.0
  return c


def apply(c: ml_collections.ConfigDict, overrides: dict) -> ml_collections.ConfigDict:
  """Sets each `group.field` of `overrides` in `c` (an experiment's variant of a table cell)."""
  for path, value in overrides.items():
    group, field = path.split('.')
    c[group][field] = value
  return c
