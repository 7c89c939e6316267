"""R ranks x W workers per rank (cluster/ranks.py) under `mpirun -np 2`, against the one-host
cluster of R * W workers and the float64 reference (tests/reference.py).

One launch (`tests/mpi_ranks.py`, JAX started once, 4 XLA CPU devices per rank) runs every case:

- every algorithm at 2 x 1 (one worker per rank), 2 x 2 (one device per rank: the two workers
  vmapped together) and 2 x 4 (two devices per rank, two workers each), with worker speeds that
  make the batches, the weights and the ranks' totals unequal (proportional sampling;
  AsynLocal-SGD's local step counts instead), and a learning rate that changes every step;
- CoCoD-SGD's overlap options (a delay, the eager update, the anchor) at 2 x 1, 2 x 2 and 2 x 4,
  the same way;
- CoCoD-SGD at 2 x 4 on four devices per rank (one worker each): the run on two, to float32
  rounding (XLA:CPU compiles a vmapped step of 1, 2 or 4 workers per device apart, and the
  one-host cluster's numbers move in the last bit between such placements too);
- a resume at 2 x 2: CoCoD-SGD (rounds of 3 over epochs of 2 steps, so a round is in flight at
  every epoch end) stopped after 2 of 3 epochs and continued from its checkpoint: bit for bit
  the straight run;
- a divergence on the second worker of rank 1, named by its global index, 3.

Two more launches refuse a layout: ranks with different device counts, and a worker count that
the ranks do not divide.
"""

import json
import os
import sys

import numpy as np
import pytest

from cocod_jax import shares
from cocod_jax import train
from cocod_jax import validation as config_validation
from cocod_jax.cluster import ranks
from cocod_jax.record import schema as results_schema
from tests import helpers
from tests import mpi_helpers
from tests import reference

pytestmark = pytest.mark.mpi  # Every test here launches mpirun.

ALGOS = helpers.ALGOS + ('asynlocal_sgd',)
# Per layout (workers per rank): the worker speeds and the devices per rank. Rank 0 holds the
# first W workers. Under proportional sampling M_i = 5 C_i: at 2 x 2 the ranks hold 15 and 20
# examples a step, at 2 x 4 25 and 35.
LAYOUTS = {
  1: ((1.0, 2.0), 1),
  2: ((1.0, 2.0, 2.0, 2.0), 1),
  4: ((1.0, 2.0, 1.0, 1.0, 2.0, 2.0, 1.0, 2.0), 2),
}
EPOCHS, BATCH = 3, 5
# Period 2 (AsynLocal-SGD's k_i = 2 C_i makes its shards 10 C_i like everyone's); CoCoD-SGD's 3
# puts a round across every epoch end (2 steps an epoch), which the resume case needs.
PERIODS = {'cocod_sgd': 3}
# CoCoD-SGD's overlap options at 2 x 1, 2 x 2 and 2 x 4: (config fields, the reference's arguments).
# Rounds of 3 with a rate that changes every step (the anchor divides by the round's last).
OPTIONS = {
  'delay': ({'delay': 2}, {'delay': 2}),
  'eager': ({'correction': 'eager', 'eager_lambda': 0.25, 'eager_gamma': 1.0},
            {'correction': 'eager', 'eager': (0.25, 1.0)}),
  'anchor': ({'correction': 'anchor', 'anchor_pull': 0.6, 'anchor_momentum': 0.7},
             {'correction': 'anchor', 'anchor': (0.6, 0.7)}),
  # Streamed CoCoD-SGD: P = 2 in rounds of 3 (P does not divide k), and P = 3 with tau = 2 (two
  # fragments in flight at once). The linear model's part flattens as (bias, kernel).
  'streamed': ({'fragments': 2}, {'fragments': 2, 'order': [1, 0]}),
  'streamed_tau2': ({'fragments': 3, 'delay': 2}, {'fragments': 3, 'delay': 2, 'order': [1, 0]}),
}  # fmt: skip
OPTION_WIDTHS = (1, 2, 4)  # 2 x 4: two devices per rank, two workers each
# CoCoD-SGD with a compressed snapshot allreduce (comm.dtype, error feedback, workers per rank).
COMPRESSED = {'int8_ef_2x2': ('int8', True, 2), 'bf16_2x4': ('bfloat16', False, 4)}
# A launch this long without a line of output hangs: it prints a line per epoch of every run and
# one per case (the longest silence measured: 15 s, the first run's start and compilation, in a
# launch of 177 s on 2 busy cores).
SILENT_S = 300


def _params(workdir):
  with np.load(os.path.join(workdir, 'final_params.npz')) as f:
    return {k: f[k] for k in f.files}


def _exact_case(root, algorithm, width):
  """(config, data, lr(t)) of the exactness case of `algorithm` on 2 ranks of `width` workers."""
  root.mkdir()
  speeds, devices = LAYOUTS[width]
  ps = algorithm != 'asynlocal_sgd'
  # Shards ~ M_i k_i: 10 examples per unit of speed either way (k_i = 2 C_i for AsynLocal-SGD).
  n_train = int(10 * sum(speeds))
  path, x, y = helpers.tiny_npz(root, n_train=n_train)
  period = PERIODS.get(algorithm, 2)
  c = helpers.small_config(path, algorithm, 2 * width, BATCH, EPOCHS, period, speeds=speeds, ps=ps)
  lr = helpers.lr_warmup(c)
  c.backend = 'mpi'
  c.mpi.devices = devices
  c.timeline.sample_every = 1
  c.checkpoint.every_epochs = 1  # Changes no number; the resume case continues one.
  return c, (x, y), lr


def _diverging_config(root):
  root.mkdir()
  path, x, y = helpers.tiny_npz(root, n_train=40)
  x = x.copy()
  x[30:40] *= 1e30  # Worker 3's shard: rank 1's second worker.
  np.savez(path, x_train=x, y_train=y, x_test=x[:5], y_test=y[:5])
  c = helpers.small_config(path, 'local_sgd', 4, 5, 3, 3)
  c.backend = 'mpi'
  return c


@pytest.fixture(scope='module')
def launch(tmp_path_factory):
  """Runs every case in one `mpirun -np 2`; returns {name: (config, workdir, extra)}."""
  root = tmp_path_factory.mktemp('ranks')
  cases = {}
  for width in LAYOUTS:
    for algorithm in ALGOS:
      c, data, lr = _exact_case(root / f'{algorithm}_{width}', algorithm, width)
      cases[f'{algorithm}_2x{width}'] = (c, {'data': data, 'lr': lr})
  for width in OPTION_WIDTHS:
    for name, (fields, _) in OPTIONS.items():
      c, data, lr = _exact_case(root / f'{name}_{width}', 'cocod_sgd', width)
      c.algorithm.update(fields)
      cases[f'{name}_2x{width}'] = (c, {'data': data, 'lr': lr})
  c, _, _ = _exact_case(root / 'devices4', 'cocod_sgd', 4)
  c.mpi.devices = 4
  cases['cocod_sgd_2x4_on_4'] = (c, {})
  resumed, _, _ = _exact_case(root / 'resumed', 'cocod_sgd', 2)
  resumed.num_epochs = 2
  cases['resumed'] = (resumed, {'then_epochs': EPOCHS})
  cases['diverged'] = (_diverging_config(root / 'diverged'), {})
  for name, (dtype, feedback, width) in COMPRESSED.items():
    c, _, _ = _exact_case(root / name, 'cocod_sgd', width)
    c.comm.dtype, c.comm.error_feedback, c.mpi.workers_per_rank = dtype, feedback, width
    cases[name] = (c, {})
  resumed, _, _ = _exact_case(root / 'int8_resumed', 'cocod_sgd', 2)
  resumed.comm.dtype, resumed.comm.error_feedback, resumed.mpi.workers_per_rank = 'int8', True, 2
  resumed.num_epochs = 2
  cases['int8_resumed'] = (resumed, {'then_epochs': EPOCHS})
  resumed, _, _ = _exact_case(root / 'streamed_resumed', 'cocod_sgd', 2)
  resumed.algorithm.update(OPTIONS['streamed_tau2'][0])
  resumed.num_epochs = 2
  cases['streamed_resumed'] = (resumed, {'then_epochs': EPOCHS})
  listed = []
  for name, (c, extra) in cases.items():
    config_validation.validate(c)
    workdir = str(root / 'runs' / name)
    extra['workdir'] = workdir
    listed.append(dict(name=name, config=c.to_dict(), workdir=workdir,
                       then_epochs=extra.get('then_epochs')))  # fmt: skip
  (root / 'cases.json').write_text(json.dumps(listed))
  script = (sys.executable, 'tests/mpi_ranks.py', str(root / 'cases.json'))
  p = mpi_helpers.mpirun('-np', '2', *script, silent_s=SILENT_S)
  assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
  return cases


CASES = [(a, w) for w in sorted(LAYOUTS) for a in ALGOS]
CASES += [(name, w) for w in OPTION_WIDTHS for name in sorted(OPTIONS)]


@pytest.mark.parametrize('algorithm,width', CASES)
def test_ranks_equal_one_host_and_reference(tmp_path, launch, algorithm, width):
  c, extra = launch[f'{algorithm}_2x{width}']
  options = {}
  if algorithm in OPTIONS:
    algorithm, options = 'cocod_sgd', OPTIONS[algorithm][1]
  got = _params(extra['workdir'])
  # The one-host cluster of 2 W workers: the same sums (in another order when W > 1).
  one = c.copy_and_resolve_references()
  one.backend = 'one_host'
  train.train_and_evaluate(one, str(tmp_path / 'one'))
  tight = width == 1  # w_0 x_0 + w_1 x_1 either way.
  for k, v in _params(tmp_path / 'one').items():
    rtol, atol = (1e-6, 1e-7) if tight else (1e-5, 1e-6)
    np.testing.assert_allclose(got[k], v, rtol=rtol, atol=atol, err_msg=k)
  x, y = extra['data']
  speeds = LAYOUTS[width][0]
  sizes = shares.batch_sizes(c)
  shards = helpers.shards_of(x, y, [int(10 * s) for s in speeds])
  lr = extra['lr']
  expected = reference.run(
    algorithm,
    shards,
    3,
    EPOCHS * 2,
    lambda t: lr(t, 2),
    0.9,
    1e-4,
    c.algorithm.period,
    sizes,
    speeds=speeds,
    **options,
  )
  np.testing.assert_allclose(got['params/Dense_0/kernel'], expected[0], rtol=2e-5, atol=2e-6)
  np.testing.assert_allclose(got['params/Dense_0/bias'], expected[1], rtol=2e-5, atol=2e-6)


def test_layout_and_timing_in_results(launch):
  res = results_schema.load_results(os.path.join(launch['cocod_sgd_2x4'][1]['workdir'],
                                                 'results.json'))  # fmt: skip
  assert res['layout'] == {'processes': 2, 'workers_per_process': 4, 'devices_per_process': 2,
                           'platform': 'cpu'}  # fmt: skip
  assert res['batch_sizes'] == [5, 10, 5, 5, 10, 10, 5, 10]
  tm = res['timing']
  # 2 measured epochs of 2 steps in rounds of 3 (steps 3-5, waited for at the end of epoch 2):
  # 1 snapshot average per rank, with its local mean (every round is timed here), both counted
  # in the communication.
  for rank in tm['ranks']:
    assert rank['collectives'] == 1 and rank['local_means'] == 1
    assert rank['Tl_s'] > 0 and rank['local_s'] > 0 and rank['comm_s'] > rank['local_s']
    assert rank['exposed_comm_s'] >= rank['local_s']  # Nothing hides a local mean.
  assert tm['Tl_s'] > 0 and 0 <= tm['hidden_fraction'] <= 1
  trace = json.loads(open(os.path.join(launch['cocod_sgd_2x4'][1]['workdir'],
                                       'timeline_rank1.json')).read())  # fmt: skip
  lanes = {(e['name'], e.get('tid')) for e in trace['traceEvents'] if e['ph'] == 'X'}
  assert {('step', 0), ('local_mean', 2), ('allreduce', 1), ('wait', 0)} <= lanes
  ssgd = results_schema.load_results(os.path.join(launch['ssgd_2x2'][1]['workdir'],
                                                  'results.json'))['timing']  # fmt: skip
  assert ssgd['hidden_fraction'] == 0.0 and ssgd['Tl_s'] > 0  # Blocking: all exposed.


def test_one_worker_per_device(launch):
  two = _params(launch['cocod_sgd_2x4'][1]['workdir'])
  four = _params(launch['cocod_sgd_2x4_on_4'][1]['workdir'])
  for k in two:
    np.testing.assert_allclose(four[k], two[k], rtol=1e-6, atol=1e-7, err_msg=k)


def test_resume_at_two_by_two_is_exact(launch):
  workdir = launch['resumed'][1]['workdir']
  case = json.loads(open(os.path.join(workdir, 'case.json')).read())
  assert case['resumed'] == [None, 4]  # Fresh, then from the checkpoint at the end of epoch 2.
  with open(os.path.join(workdir, 'checkpoints', f'{4:010d}', 'rank_1.json')) as f:
    part = json.load(f)
  assert part['workers'] == [2, 3] and part['algo']['round_start'] == 3  # A round in flight.
  straight, resumed = _params(launch['cocod_sgd_2x2'][1]['workdir']), _params(workdir)
  assert straight.keys() == resumed.keys()
  for k in straight:
    np.testing.assert_array_equal(resumed[k], straight[k], err_msg=k)


def test_streamed_resume_with_a_fragment_in_flight_is_exact(launch):
  # P = 3, tau = 2 in rounds of 3 (steps 3-5): at the checkpoint at step 4 fragment 0 is
  # corrected, fragment 1 in flight (its average drained into the checkpoint), fragment 2 not
  # yet sent.
  workdir = launch['streamed_resumed'][1]['workdir']
  case = json.loads(open(os.path.join(workdir, 'case.json')).read())
  assert case['resumed'] == [None, 4]
  with open(os.path.join(workdir, 'checkpoints', f'{4:010d}', 'rank_1.json')) as f:
    part = json.load(f)
  assert part['algo']['round_start'] == 3 and part['algo']['queued'] == [1]
  assert part['algo']['started'] == 2
  straight, resumed = _params(launch['streamed_tau2_2x2'][1]['workdir']), _params(workdir)
  assert straight.keys() == resumed.keys()
  for k in straight:
    np.testing.assert_array_equal(resumed[k], straight[k], err_msg=k)


def test_streamed_sends_its_fragments_alone(launch):
  # Under MPI a fragment's collective stages its elements (float32) and one divergence flag per
  # worker of the cluster; the timing gives Tc of a fragment and of a round.
  res = results_schema.load_results(os.path.join(launch['streamed_tau2_2x4'][1]['workdir'],
                                                 'results.json'))  # fmt: skip
  fig = res['snapshot_allreduce']
  assert fig['fragments'] == 3 and fig['delay'] == 2 and fig['elements'] == 5 * 3 + 3
  assert fig['fragment_elements'] == [6, 6, 6]
  assert fig['bytes_per_collective'] == {str(f): 4 * (6 + 8) for f in range(3)}
  tm = res['timing']
  assert tm['fragments'] == 3 and tm['Tc_fragment_s'] > 0
  assert tm['Tc_round_s'] == pytest.approx(3 * tm['Tc_fragment_s'])
  assert tm['r'] == pytest.approx(tm['Tc_round_s'] / tm['Tp_s'])


def test_divergence_names_the_global_worker(launch):
  workdir = launch['diverged'][1]['workdir']
  case = json.loads(open(os.path.join(workdir, 'case.json')).read())
  assert case['diverged'].startswith('training diverged: worker(s) [3] had non-finite values')
  res = json.loads(open(os.path.join(workdir, 'results.json')).read())
  assert res['status'] == 'diverged' and res['diverged']['workers'] == [3]


def test_different_device_counts_refused_on_every_rank(tmp_path):
  # Rank 0 has 2 XLA CPU devices, rank 1 one: with mpi.devices=0 each takes what divides its 2
  # workers, so the layouts differ; both ranks stop before loading data, naming both values.
  base = [sys.executable, '-m', 'cocod_jax.main', '--config=configs/test.py',
          f'--workdir={tmp_path}', '--config.backend=mpi', '--config.num_workers=4']  # fmt: skip
  two = ['env', 'XLA_FLAGS=--xla_force_host_platform_device_count=2']
  p = mpi_helpers.mpirun('-np', '1', *two, *base, ':', '-np', '1', *base, silent_s=120)
  assert p.returncode == 2, p.stderr[-3000:]
  for rank in (0, 1):
    line = (
      f'error: rank {rank}: the ranks hold different layouts: rank 0 holds 2 workers on 2 cpu '
      'device(s), rank 1 holds 2 workers on 1 cpu device(s)'
    )
    assert line in p.stderr, p.stderr
  assert 'Traceback' not in p.stderr and not os.listdir(tmp_path)


def test_workers_per_rank():
  assert ranks.workers_per_rank(16, 2) == 8 and ranks.workers_per_rank(2, 2) == 1
  assert ranks.workers_per_rank(16, 2, requested=8) == 8
  with pytest.raises(ValueError, match=r'num_workers=3 is invalid for this job of 2 MPI ranks'):
    ranks.workers_per_rank(3, 2)
  with pytest.raises(ValueError, match=r'num_workers=16 need 2 MPI ranks, and this job has 4'):
    ranks.workers_per_rank(16, 4, requested=8)
  c = helpers.test_config.get_config()
  c.mpi.devices = -1
  c.mpi.workers_per_rank = 3  # num_workers is 2.
  assert config_validation.errors(c) == [
    'mpi.devices=-1 is invalid; allowed: an integer >= 0',
    'mpi.workers_per_rank=3 is invalid for num_workers=2; allowed: 0 (num_workers / the MPI '
    'ranks) or a divisor of 2',
  ]


@pytest.mark.parametrize('name', sorted(COMPRESSED))
def test_compressed_ranks_equal_one_host(tmp_path, launch, name):
  # The one-host cluster sends one message per group of mpi.workers_per_rank workers, as the
  # ranks do, and adds the decoded messages in the same order.
  c, extra = launch[name]
  got = _params(extra['workdir'])
  one = c.copy_and_resolve_references()
  one.backend = 'one_host'
  res = train.train_and_evaluate(one, str(tmp_path / 'one'))
  for k, v in _params(tmp_path / 'one').items():
    np.testing.assert_allclose(got[k], v, rtol=1e-6, atol=1e-7, err_msg=k)
  # The compression is in the numbers: the float32 run of the same layout ends elsewhere.
  plain = _params(launch[f'cocod_sgd_2x{COMPRESSED[name][2]}'][1]['workdir'])
  assert not np.allclose(got['params/Dense_0/kernel'], plain['params/Dense_0/kernel'], rtol=1e-6)
  # What a sender sends a round: 18 values (5 x 3 + 3), 1 or 2 bytes each, 2 float32 scales,
  # and under MPI one float32 divergence flag per worker of the cluster.
  mpi_res = results_schema.load_results(os.path.join(extra['workdir'], 'results.json'))
  dtype, _, width = COMPRESSED[name]
  payload = 18 + 8 if dtype == 'int8' else 36
  assert res['snapshot_allreduce']['payload_bytes'] == payload
  assert mpi_res['snapshot_allreduce']['payload_bytes'] == payload + 4 * 2 * width
  assert 0 < res['snapshot_allreduce']['update_rel_error'] < 0.05


def test_compressed_resume_is_exact(launch):
  # The reference (the last average) and the rank's rounding error travel in the checkpoint.
  workdir = launch['int8_resumed'][1]['workdir']
  case = json.loads(open(os.path.join(workdir, 'case.json')).read())
  assert case['resumed'] == [None, 4]
  straight, resumed = _params(launch['int8_ef_2x2'][1]['workdir']), _params(workdir)
  for k in straight:
    np.testing.assert_array_equal(resumed[k], straight[k], err_msg=k)
