"""What each config field means, in one table: `python -m cocod_jax.main --config=FILE[:ARG]
--show_config` prints every field of the config with its value and its line here.

tests/describe_test.py holds the table to the configs: every field of base_config and of each
configs/*.py file has a line, and no line names a field that does not exist. A new field of
config/defaults.py (base_config) gets its line here.
"""

from cocod_jax.config import loader

DESCRIPTIONS = {
  # The algorithm (cocod_jax/algorithms/).
  'algorithm.name': "'ssgd', 'pipe_sgd', 'local_sgd', 'cocod_sgd' or 'asynlocal_sgd'",
  'algorithm.period': "k, local steps a round (not S-SGD's, Pipe-SGD's); 'auto': measured (MPI)",
  'algorithm.warmup_period_epochs': 'epochs over which the period grows from 1 to k (0: none)',
  'algorithm.average_batch_stats': "average the models' batch-norm statistics with the weights",
  'algorithm.average_momentum': "average the optimizer's momentum with the weights too",
  'algorithm.correction': (
    "CoCoD-SGD's correction when a round's average arrives: 'cocod' (the paper's), 'reset', "
    "'blend', 'outer_sgd', 'eager' or 'anchor'"
  ),
  'algorithm.alpha': "correction='blend': the local model's share of the blend, in [0, 1]",
  'algorithm.outer_lr': "correction='outer_sgd': the outer learning rate (DiLoCo's)",
  'algorithm.outer_momentum': "correction='outer_sgd': the outer momentum, in [0, 1)",
  'algorithm.outer_nesterov': "correction='outer_sgd': Nesterov's form of the outer momentum",
  'algorithm.eager_lambda': "correction='eager': the weight of a worker's own fresh progress",
  'algorithm.eager_gamma': "correction='eager': the extrapolation of the other workers' progress",
  'algorithm.anchor_pull': "correction='anchor': the pull towards the anchor, in [0, 1]",
  'algorithm.anchor_momentum': "correction='anchor': the anchor's momentum, in [0, 1)",
  'algorithm.delay': (
    "CoCoD-SGD: the snapshot taken tau steps before the round's end, 1 <= tau <= k; None: at "
    "the round's start (the paper's); 'auto': measured (MPI)"
  ),
  'algorithm.fragments': (
    "streamed CoCoD-SGD: the synced part cut into P contiguous fragments, one fragment's "
    "allreduce a step (1: the paper's whole-model allreduce)"
  ),
  # Where the workers run (cocod_jax/cluster/).
  'backend': "'one_host' (every worker in one process) or 'mpi' (R ranks under mpirun or srun)",
  'one_host.devices': 'one_host: the devices the workers are sharded over; 0: the most dividing N',
  'mpi.workers_per_rank': 'mpi: W, the workers of a rank; 0: num_workers / the ranks',
  'mpi.devices': "mpi: a rank's local devices its workers are sharded over; 0: the most dividing W",
  'comm.dtype': "mpi, CoCoD-SGD: the snapshot allreduce's type: 'float32', 'bfloat16' or 'int8'",
  'comm.error_feedback': "mpi, CoCoD-SGD: add what rounding lost to the next round's snapshot",
  'comm.threaded': 'mpi: collectives on a background thread (False: synchronous, for tests)',
  'comm.staging': "mpi: where the allreduce runs: 'host' (mpi4py) or 'device' (mpi4jax)",
  'comm.timeout_s': 'mpi: a collective slower than this many seconds ends the job on every rank',
  'timeline.sample_every': 'mpi: time every n-th round (1: every round, 0: none)',
  'num_workers': 'N, the workers',
  'worker_speeds': 'C_i, the relative speed of each worker (one per worker); empty: all equal',
  'proportional_sampling': 'batch M_i and shard proportional to C_i (PS)',
  'emulate_speeds': 'mpi: slow worker i down to C_i / C_max of its speed (time only)',
  # The model and the data.
  'model.name': ("'resnet18', 'vgg16', 'cnn', 'mlp', 'cnn1d', 'mlp1d', 'linear' or 'linear_bn'"),
  'dataset.name': (
    "'cifar10', 'cifar100', 'digits', 'clusters100', 'mnist1d', 'mnist1d_large', "
    "'mnist1d_hard' or 'npz' (your file: dataset.path)"
  ),
  'dataset.path': "dataset.name='npz': the .npz file",
  'dataset.shuffle': "shuffle each worker's shard every epoch",
  'dataset.augment': 'random crops and flips (CIFAR)',
  'dataset.num_classes': 'the classes; 0: from the data',
  'dataset.train_examples': "MNIST-1D: training examples generated; 0: the variant's",
  'dataset.test_examples': "MNIST-1D: test examples generated; 0: the variant's",
  'data_dir': "TFDS data dir (CIFAR); '': $TFDS_DATA_DIR, else ~/tensorflow_datasets",
  'batch_size': 'the basic batch of one worker (M_i of a worker at full speed)',
  # The optimizer and its schedule.
  'optimizer.name': "'sgd', or 'adam' (only for MNIST-1D's published recipe)",
  'optimizer.learning_rate': 'the base learning rate (before lr_scaling)',
  'optimizer.momentum': 'SGD momentum, in [0, 1)',
  'optimizer.weight_decay': 'L2 weight decay',
  'optimizer.lr_scaling': "'linear': the rate times the total batch / batch_size; 'none'",
  'optimizer.warmup_epochs': 'epochs of linear warm-up of the learning rate (0: none)',
  'optimizer.decay_epochs': 'the epochs at which the learning rate is multiplied by decay_factor',
  'optimizer.decay_factor': 'the factor of each decay, 0 < factor <= 1',
  # Checkpoints (workdir/checkpoints; a rerun resumes from there).
  'checkpoint.every_epochs': 'a checkpoint after every n-th epoch and the last (0: not by epochs)',
  'checkpoint.interval_s': 'also one when this many seconds passed since the last (0: never)',
  'checkpoint.keep': 'committed checkpoints kept',
  'checkpoint.preempt_deadline_s': 'after a SIGTERM, exit at once if the checkpoint is not done',
  # The run.
  'num_epochs': 'epochs to train (more on a finished run continues it)',
  'seed': 'the seed of the initial model and the batches',
  'eval_train_examples': (
    "> 0: each epoch the averaged model's loss and accuracy on the first n training examples"
  ),
}


def lines(config) -> list[str]:
  """`field = value  # description` for every field of `config` (a ConfigDict), in its order;
  a field without a line in DESCRIPTIONS says so."""
  flat = loader.flatten(config)
  shown = {path: f'{path} = {value!r}' for path, value in flat.items()}
  width = max(len(s) for s in shown.values())
  return [
    f'{shown[path]:<{width}}  # {DESCRIPTIONS.get(path, "(no description)")}' for path in flat
  ]


def show(config, spec: str) -> str:
  """What --show_config prints: the config file and its fields, their values and meanings."""
  count = len(loader.flatten(config))
  head = f'# --config={spec}: {count} fields (set one with --config.FIELD=VALUE)'
  return '\n'.join([head, *lines(config)]) + '\n'
