"""The benchmark's runs (launch/bench.py): one function a section, each returning or filling in its
part of the report (bench.json's content).

Training jobs run on 2 MPI ranks inside launch/simnet.sh (`run_job`); the other sections run
launch/'s measuring scripts (bench_overhead.py, bench_comm.py, bench_checkpoint.py) and read the
JSON each writes. The settings come from bench.py's flags, as arguments.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

from launch import bench_model
from launch import plot_timeline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The multi-worker ranks: 2 ranks x RANKS_WIDTH workers, the total batch of the overlap section.
RANKS_WIDTH = 8
RANKS_FLAGS = (
  f'--config.num_workers={2 * RANKS_WIDTH}',
  f'--config.mpi.workers_per_rank={RANKS_WIDTH}',
  '--config.batch_size=128',
)
HETERO_FLAGS = ('--config.worker_speeds=(1.0,2.0)', '--config.emulate_speeds=True')


def write_data(path, n_train=20480, n_test=2048, dim=64, classes=10, seed=0):
  """A learnable synthetic set: labels of a random linear teacher, with noise."""
  rs = np.random.RandomState(seed)
  x = rs.randn(n_train + n_test, dim).astype(np.float32)
  teacher = rs.randn(dim, classes)
  y = np.argmax(x @ teacher + 0.5 * rs.randn(len(x), classes), axis=1).astype(np.int32)
  np.savez(path, x_train=x[:n_train], y_train=y[:n_train], x_test=x[n_train:], y_test=y[n_train:])


def run_job(out, workdir, rate_kbit, algorithm, *extra, data='synthetic.npz', label=None):
  """One training job on the shaped link, on the data set `data` in `out`; returns results.json's
  `timing`."""
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  shutil.rmtree(workdir, ignore_errors=True)  # A fresh run: nothing to resume, no old events.
  cmd = [
    os.path.join(ROOT, 'launch', 'simnet.sh'),
    '--rate',
    f'{int(rate_kbit)}kbit',
    '--',
    os.path.join(ROOT, 'launch', 'mpirun.sh'),
    '-np',
    '2',
    sys.executable,
    '-m',
    'cocod_jax.main',
    '--config=configs/bench.py',
    f'--config.dataset.path={out}/{data}',
    f'--workdir={workdir}',
    f'--config.algorithm.name={algorithm}',
    *extra,
  ]
  start = time.perf_counter()
  p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
  if p.returncode != 0:
    raise RuntimeError(f'{" ".join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}')
  with open(os.path.join(workdir, 'results.json')) as f:
    res = json.load(f)
  timing = res['timing']
  timing['wall_s'] = time.perf_counter() - start
  timing['test_accuracy'] = res['final']['test_accuracy']
  timing['steps_per_epoch'] = res['steps_per_epoch']
  timing['tau'] = (res.get('snapshot_allreduce') or {}).get('delay')  # Streamed: tau it used.
  print(
    f'  {label or bench_model.NAMES[algorithm]:13s} {rate_kbit / 1000:7.0f} Mbit/s  '
    f'step {timing["step_time_s"] * 1e3:6.1f} ms  Tp {timing["Tp_s"] * 1e3:6.1f}  '
    f'Tc {timing["Tc_s"] * 1e3:6.1f}  hidden '
    + ('  - ' if timing['hidden_fraction'] is None else f'{timing["hidden_fraction"]:4.0%}'),
    flush=True,
  )
  return timing


def calibrate(out, probe_rates_mbit):
  """Fits Tc = a + b / rate from S-SGD at two rates; returns (a, b, Tp, the runs)."""
  runs = []
  for mbit in probe_rates_mbit:
    kbit = float(mbit) * 1000
    tm = run_job(out, os.path.join(out, 'calibrate', f'{mbit}mbit'), kbit, 'ssgd')
    runs.append({'rate_kbit': kbit, 'Tp_s': tm['Tp_s'], 'Tc_s': tm['Tc_s']})
  (r1, r2) = runs[0], runs[-1]
  b = (r1['Tc_s'] - r2['Tc_s']) / (1 / r1['rate_kbit'] - 1 / r2['rate_kbit'])
  a = r1['Tc_s'] - b / r1['rate_kbit']
  tp = statistics.mean(r['Tp_s'] for r in runs)
  return a, b, tp, runs


def _script(*args, timeout=1800):
  """Runs one of launch/'s measuring scripts; raises with its stderr on failure."""
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  p = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
  print(p.stdout, end='', flush=True)
  if p.returncode != 0:
    raise RuntimeError(f'{" ".join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}')


def measure_overhead(out):
  """The loop against a bare jitted loop (launch/bench_overhead.py); its overhead.json."""
  print('overhead (one process, bare loop against train_and_evaluate):', flush=True)
  path = os.path.join(out, 'overhead.json')
  _script(sys.executable, 'launch/bench_overhead.py', '--repeats=7', '--epochs=12', f'--out={path}')
  with open(path) as f:
    return json.load(f)


def measure_comm(out, comm_rate):
  """The communicator against raw mpi4py on 2 ranks (launch/bench_comm.py), over shared memory
  and over the simulated link at `comm_rate`; the two comm_*.json."""
  results = []
  mpirun = [os.path.join(ROOT, 'launch', 'mpirun.sh'), '-np', '2', sys.executable]
  for name, prefix in (
    ('shm', []),
    ('link', [os.path.join(ROOT, 'launch', 'simnet.sh'), '--rate', comm_rate, '--']),
  ):
    print(f'communicator against raw mpi4py ({name}):', flush=True)
    path = os.path.join(out, f'comm_{name}.json')
    _script(*prefix, *mpirun, 'launch/bench_comm.py', f'--out={path}')
    with open(path) as f:
      results.append(json.load(f))
  return results


def measure_checkpoint(out):
  """A checkpoint's write and restore (launch/bench_checkpoint.py); its checkpoint.json."""
  print('checkpoint cost:', flush=True)
  path = os.path.join(out, 'checkpoint.json')
  _script(sys.executable, 'launch/bench_checkpoint.py', f'--out={path}')
  with open(path) as f:
    return json.load(f)


def measure_overlap(out, report, ratios, repeats, stagings):
  """The four algorithms at each target r, then the stagings at the largest."""
  algos = bench_model.ALGOS
  a, b, tp = (report['calibration'][k] for k in ('a_s', 'b_s_kbit', 'Tp_s'))
  report['ratios'], rates = [], {}
  for target in [float(x) for x in ratios]:
    want = target * tp
    if want <= a:
      raise SystemExit(f'bench: r={target:g} needs Tc={want * 1e3:.1f} ms < the fitted floor')
    rates[target] = rate = b / (want - a)
    print(f'r = {target:g}: link rate {rate / 1000:.0f} Mbit/s', flush=True)
    by_algo = {algo: [] for algo in algos}
    for rep in range(repeats):
      order = algos[rep % len(algos) :] + algos[: rep % len(algos)]
      for algo in order:
        wd = os.path.join(out, f'r{target:g}', f'rep{rep}', algo)
        by_algo[algo].append(run_job(out, wd, rate, algo))
    rows = bench_model.summarize(by_algo, rate, target, report['calibration'])
    report['ratios'].append({'target_r': target, 'rate_kbit': rate, 'runs': by_algo, 'rows': rows})
    dirs = [os.path.join(out, f'r{target:g}', 'rep0', algo) for algo in algos]
    png = os.path.join(out, f'timeline_r{target:g}.png')
    names = [bench_model.NAMES[x] for x in algos]
    plot_timeline.plot(dirs, names, png, title=f'r = {target:g}')
  top = max(rates)
  report['stagings'] = {}
  print(f'staging comparison, CoCoD-SGD at r = {top:g}:', flush=True)
  for rep in range(repeats):
    for staging in stagings:
      wd = os.path.join(out, 'staging', f'rep{rep}', staging)
      tm = run_job(out, wd, rates[top], 'cocod_sgd', f'--config.comm.staging={staging}')
      report['stagings'].setdefault(staging, []).append(tm)


def rate_for(report, target):
  """The link rate (kbit/s) that the calibration's fit gives for r = Tc / Tp = `target`."""
  a, b, tp = (report['calibration'][k] for k in ('a_s', 'b_s_kbit', 'Tp_s'))
  want = target * tp
  if want <= a:
    raise SystemExit(f'bench: r={target:g} needs Tc={want * 1e3:.1f} ms < the fitted floor')
  return b / (want - a)


def measure_streamed(out, report, ratios, repeats):
  """Streamed CoCoD-SGD (P = 5 of k = 5) with tau = 1 and with delay='auto', beside S-SGD, at each
  target r (rates from the calibration); the round time against max(k Tp, Tc) of the S-SGD run
  of the same repeat (bench_model.STREAMED)."""
  variants = bench_model.STREAMED
  report['streamed'] = []
  for target in [float(x) for x in ratios]:
    rate = rate_for(report, target)
    print(f'streamed, r = {target:g}: link rate {rate / 1000:.0f} Mbit/s', flush=True)
    runs = {name: [] for name, _, _ in variants}
    for rep in range(repeats):
      for name, algorithm, extra in (
        variants[rep % len(variants) :] + variants[: rep % len(variants)]
      ):
        wd = os.path.join(out, 'streamed', f'r{target:g}', f'rep{rep}', name.replace(' ', '_'))
        runs[name].append(run_job(out, wd, rate, algorithm, *extra, label=name))
    report['streamed'].append({'target_r': target, 'rate_kbit': rate, 'runs': runs})


def measure_hetero(out, report, repeats):
  """The mixed cluster at r = Tc / Tp_slow of about 1 (Tp_slow: twice the calibrated Tp)."""
  a, b, tp = (report['calibration'][k] for k in ('a_s', 'b_s_kbit', 'Tp_s'))
  rate = b / (2 * tp - a)
  write_data(os.path.join(out, 'hetero.npz'), n_train=30720)
  print(f'mixed cluster (rank 0 at half speed), link {rate / 1000:.0f} Mbit/s:', flush=True)
  hetero = bench_model.HETERO
  runs = {name: [] for name, _, _ in hetero}
  for rep in range(repeats):
    for name, algorithm, ps in hetero[rep % len(hetero) :] + hetero[: rep % len(hetero)]:
      wd = os.path.join(out, 'hetero', f'rep{rep}', name.replace('+', '_'))
      extra = HETERO_FLAGS + (f'--config.proportional_sampling={ps}',)
      runs[name].append(run_job(out, wd, rate, algorithm, *extra, data='hetero.npz', label=name))
  report['hetero'] = {'rate_kbit': rate, 'runs': runs}


def measure_ranks(out, report, repeats, probe_rates_mbit):
  """2 ranks x RANKS_WIDTH workers, S-SGD and CoCoD-SGD at r of about 1 (launch/bench.py's
  docstring); the probe for this layout's Tp on the fastest calibration link."""
  algos = bench_model.RANKS_ALGOS
  a, b = (report['calibration'][k] for k in ('a_s', 'b_s_kbit'))
  if not os.path.exists(os.path.join(out, 'synthetic.npz')):
    write_data(os.path.join(out, 'synthetic.npz'))
  print(f'2 ranks x {RANKS_WIDTH} workers: probe (S-SGD) for Tp:', flush=True)
  fast = float(probe_rates_mbit[-1]) * 1000
  probe = run_job(out, os.path.join(out, 'ranks', 'probe'), fast, 'ssgd', *RANKS_FLAGS)
  if probe['Tp_s'] <= a:
    raise SystemExit(f'bench: Tp={probe["Tp_s"] * 1e3:.1f} ms is below the fitted Tc floor')
  rate = b / (probe['Tp_s'] - a)
  print(f'r = 1: link rate {rate / 1000:.0f} Mbit/s', flush=True)
  runs = {algo: [] for algo in algos}
  for rep in range(repeats):
    for algo in algos if rep % 2 == 0 else algos[::-1]:
      wd = os.path.join(out, 'ranks', f'rep{rep}', algo)
      runs[algo].append(run_job(out, wd, rate, algo, *RANKS_FLAGS))
  report['ranks'] = {
    'workers_per_rank': RANKS_WIDTH,
    'rate_kbit': rate,
    'probe': probe,
    'runs': runs,
  }
  dirs = [os.path.join(out, 'ranks', 'rep0', algo) for algo in algos]
  png = os.path.join(out, 'timeline_ranks.png')
  names = [bench_model.NAMES[x] for x in algos]
  plot_timeline.plot(dirs, names, png, title=f'2 x {RANKS_WIDTH}, r = 1')
