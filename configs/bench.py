"""The overlap benchmark's training job (`make bench` runs it; see launch/bench.py).

    launch/simnet.sh --rate 600mbit -- launch/mpirun.sh -np 2 python -m cocod_jax.main \
        --config=configs/bench.py --config.dataset.path=runs/bench/synthetic.npz \
        --workdir=runs/bench/one --config.algorithm.name=cocod_sgd

2 ranks, the `mlp` (2.1M parameters, an 8.3 MB allreduce) on a synthetic 64-feature, 10-class
set that launch/bench.py writes (20480 training examples: 10 steps of 1024 per worker per
epoch, so rounds of k = 5 never cross an epoch). Period 5 from the start; 6 epochs, of which the
first (compilation) is left out of the timing. Reproduces the regime of the paper's Figure 1 and
Section 4.2 time model, not an accuracy: the rate of the simulated link sets r = Tc/Tp. Every
round is timed (`timeline.sample_every=1`). The heterogeneous case adds
`--config.worker_speeds=(1.0,2.0) --config.emulate_speeds=True` (rank 0 at half speed) on a
larger set (30720 examples). About 15-40 s a run on 2 CPU cores, depending on the link rate.
"""

from configs import common


def get_config():
  c = common.small_config('mlp', 'npz', num_workers=2, batch_size=1024, num_epochs=6)
  c.backend = 'mpi'
  c.dataset.path = 'runs/bench/synthetic.npz'
  c.algorithm.period = 5
  c.optimizer.learning_rate = 0.05
  c.optimizer.lr_scaling = 'none'
  c.optimizer.decay_epochs = (1000,)
  c.comm.timeout_s = 300.0
  c.timeline.sample_every = 1  # Time every round: the benchmark's figures come from the spans.
  return common.without_checkpoints(c)  # A timing run; no checkpoints to write.
