"""`make bench`: every speed figure of the README, measured (root: the simulated network).

    .venv/bin/python launch/bench.py --out=runs/bench [--repeats=3] [--ratios=1,3]
        [--sections=overhead,comm,overlap,hetero] [--render_only]

Sections (each its own table and targets in bench.md):

- `overhead`: the training loop against a bare jitted loop of the same local step
  (launch/bench_overhead.py, one process; target: within 5%).
- `comm`: the MPI communicator against raw mpi4py on the same bytes and 2 ranks
  (launch/bench_comm.py), over shared memory and over the simulated link (targets: 80 KB within
  0.3 ms of raw; 44.7 MB on the link within 10% of raw).
- `checkpoint`: seconds to write and restore a checkpoint of ResNet18-sized state, one worker and
  16 stacked (launch/bench_checkpoint.py).
- `overlap`: the four algorithms on 2 MPI ranks inside `launch/simnet.sh`, whose loopback is
  rate-limited, so the allreduce really crosses a slow link. Calibration: S-SGD (nothing
  overlaps, so its Tp and Tc are clean) at two link rates; a fit `Tc = a + b / rate` gives the
  rate for each target `r = Tc/Tp`. For each r, `--repeats` rounds of the four algorithms (order
  rotated each repeat): time per step, speedup over the S-SGD run of the same repeat, the time
  model of docs/algorithms.md for the calibration's Tp and Tc at that rate (never the Tp and Tc of
  the runs it predicts), and the hidden fraction; then CoCoD-SGD
  with each `comm.staging` at the largest r, Pipe-SGD against its own Tp and Tc with the
  pipeline's refill at each epoch end, and a PNG of one measured round per algorithm.
- `hetero`: a mixed cluster on equal hardware, rank 0 at half speed (`emulate_speeds`), at
  r = Tc / Tp_slow of about 1: S-SGD, S-SGD+PS, Pipe-SGD+PS, AsynLocal-SGD and CoCoD-SGD+PS, each
  against the time model for mixed clusters (from the calibration), per step and per epoch.
- `ranks`: 2 ranks x 8 workers each (16 workers at batch 128: the same 2048 examples a step as
  the overlap section's 2 x 1024), S-SGD and CoCoD-SGD at r = Tc/Tp of about 1: a probe S-SGD run
  gives this layout's Tp, the calibration's fit the link rate for Tc = Tp (the allreduce is one
  model whatever W is); then `--repeats` runs of each. Time per step, speedup, Tp, the local
  mean over the rank's 8 workers (Tl), Tc and the hidden fraction (target: CoCoD-SGD at least
  1.6 times as fast per step), and a PNG of one measured round of each.

Tc is the collective itself, without a fast rank's wait inside it for a slow one
(`timeline.combine`).

Medians with [min, max] over the repeats. Writes `bench.json` (every run's figures) and
`bench.md`; `--render_only` rewrites bench.md from an existing bench.json, and `--sections=...`
with some sections measures those again and keeps the others of bench.json (the mixed cluster
alone reuses the earlier calibration).
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
import numpy as np

from cocod_jax import timeline
from cocod_jax.config import errors
from cocod_jax.config import flags as cocod_flags
from cocod_jax.record import files
from cocod_jax.record import provenance
from launch import plot_timeline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ALGOS = ('ssgd', 'pipe_sgd', 'local_sgd', 'cocod_sgd')
NAMES = dict(ssgd='S-SGD', pipe_sgd='Pipe-SGD', local_sgd='Local-SGD', cocod_sgd='CoCoD-SGD')
K = 5  # configs/bench.py's period.
SECTIONS = ('overhead', 'comm', 'checkpoint', 'overlap', 'hetero', 'ranks')
# The multi-worker ranks: 2 ranks x RANKS_WIDTH workers, the total batch of the overlap section.
RANKS_WIDTH = 8
RANKS_FLAGS = (
  f'--config.num_workers={2 * RANKS_WIDTH}',
  f'--config.mpi.workers_per_rank={RANKS_WIDTH}',
  '--config.batch_size=128',
)
RANKS_ALGOS = ('ssgd', 'cocod_sgd')
# The heterogeneous case: rank 0 at half speed; (name, algorithm, proportional sampling).
HETERO = (
  ('S-SGD', 'ssgd', False),
  ('S-SGD+PS', 'ssgd', True),
  ('Pipe-SGD+PS', 'pipe_sgd', True),
  ('AsynLocal-SGD', 'asynlocal_sgd', False),
  ('CoCoD-SGD+PS', 'cocod_sgd', True),
)
HETERO_FLAGS = ('--config.worker_speeds=(1.0,2.0)', '--config.emulate_speeds=True')

flags.DEFINE_string('out', 'runs/bench', 'Output directory.')
flags.DEFINE_integer('repeats', 3, 'Runs per algorithm and ratio.')
flags.DEFINE_list('ratios', ['1', '3'], 'Target values of r = Tc/Tp.')
flags.DEFINE_list('probe_rates_mbit', ['300', '1200'], 'Link rates of the calibration runs.')
flags.DEFINE_list('stagings', ['host', 'device'], 'comm.staging values to compare.')
flags.DEFINE_list('sections', list(SECTIONS), f'What to measure, of {SECTIONS}.')
flags.DEFINE_string('comm_rate', '1gbit', 'Link rate of the communicator comparison on the link.')
flags.DEFINE_bool(
  'render_only', False, 'Rewrite bench.md from the bench.json in --out; run nothing.'
)
FLAGS = flags.FLAGS


def predicted_step(algorithm, tp, tc, k=K):
  """Section 4.2's time per step for measured Tp and Tc (docs/algorithms.md, the time model)."""
  return timeline.model_step_time(algorithm, tp, tc, k)


def write_data(path, n_train=20480, n_test=2048, dim=64, classes=10, seed=0):
  """A learnable synthetic set: labels of a random linear teacher, with noise."""
  rs = np.random.RandomState(seed)
  x = rs.randn(n_train + n_test, dim).astype(np.float32)
  teacher = rs.randn(dim, classes)
  y = np.argmax(x @ teacher + 0.5 * rs.randn(len(x), classes), axis=1).astype(np.int32)
  np.savez(path, x_train=x[:n_train], y_train=y[:n_train], x_test=x[n_train:], y_test=y[n_train:])


def run_job(workdir, rate_kbit, algorithm, *extra, data='synthetic.npz', label=None):
  """One training job on the shaped link; returns results.json's `timing`."""
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
    f'--config.dataset.path={FLAGS.out}/{data}',
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
  print(
    f'  {label or NAMES[algorithm]:13s} {rate_kbit / 1000:7.0f} Mbit/s  '
    f'step {timing["step_time_s"] * 1e3:6.1f} ms  Tp {timing["Tp_s"] * 1e3:6.1f}  '
    f'Tc {timing["Tc_s"] * 1e3:6.1f}  hidden '
    + ('  - ' if timing['hidden_fraction'] is None else f'{timing["hidden_fraction"]:4.0%}'),
    flush=True,
  )
  return timing


def calibrate(out):
  """Fits Tc = a + b / rate from S-SGD at two rates; returns (a, b, Tp, the runs)."""
  runs = []
  for mbit in FLAGS.probe_rates_mbit:
    kbit = float(mbit) * 1000
    tm = run_job(os.path.join(out, 'calibrate', f'{mbit}mbit'), kbit, 'ssgd')
    runs.append({'rate_kbit': kbit, 'Tp_s': tm['Tp_s'], 'Tc_s': tm['Tc_s']})
  (r1, r2) = runs[0], runs[-1]
  b = (r1['Tc_s'] - r2['Tc_s']) / (1 / r1['rate_kbit'] - 1 / r2['rate_kbit'])
  a = r1['Tc_s'] - b / r1['rate_kbit']
  tp = statistics.mean(r['Tp_s'] for r in runs)
  return a, b, tp, runs


def spread(values, fmt='{:.1f}', scale=1.0):
  v = [x * scale for x in values if x is not None]
  if not v:
    return '-'
  return f'{fmt.format(statistics.median(v))} [{fmt.format(min(v))}, {fmt.format(max(v))}]'


def calibrated(calibration, rate_kbit):
  """(Tp, Tc) that the calibration runs predict at `rate_kbit`: their mean Tp, and the fit
  Tc = a + b / rate. The time model takes these, never the Tp and Tc of the runs it predicts."""
  return calibration['Tp_s'], calibration['a_s'] + calibration['b_s_kbit'] / rate_kbit


def summarize(runs_by_algo, rate_kbit, target, calibration):
  """Rows of one ratio: medians and [min, max] over the repeats; the model from `calibration`."""
  ssgd = runs_by_algo['ssgd']
  tp, tc = calibrated(calibration, rate_kbit)
  rows = []
  for algo in ALGOS:
    runs = runs_by_algo[algo]
    steps = [r['step_time_s'] for r in runs]
    speedups = [s['step_time_s'] / r['step_time_s'] for s, r in zip(ssgd, runs)]
    pred = [predicted_step(algo, tp, tc)] * len(runs)
    rows.append(
      {
        'target_r': target,
        'rate_mbit': rate_kbit / 1000,
        'algorithm': algo,
        'r_measured': [s['Tc_s'] / s['Tp_s'] for s in ssgd],
        'step_time_s': steps,
        'speedup_vs_ssgd': speedups,
        'predicted_step_s': pred,
        'hidden_fraction': [r['hidden_fraction'] for r in runs],
        'round_time_s': [r['round_time_s'] for r in runs],
        'round_vs_ideal': [
          r['round_time_s'] / max(K * s['Tp_s'], s['Tc_s']) if r['round_time_s'] else None
          for s, r in zip(ssgd, runs)
        ],
      }
    )
  return rows


def table(rows):
  lines = [
    '| target r | link | algorithm | r = Tc/Tp (S-SGD run) | ms / step | speedup vs S-SGD '
    '| model ms / step (calibration) | hidden |',
    '|---|---|---|---|---|---|---|---|',
  ]
  for row in rows:
    lines.append(
      f'| {row["target_r"]:g} | {row["rate_mbit"]:.0f} Mbit/s | {NAMES[row["algorithm"]]} '
      f'| {spread(row["r_measured"], "{:.2f}")} | {spread(row["step_time_s"], scale=1e3)} '
      f'| {spread(row["speedup_vs_ssgd"], "{:.2f}")}x '
      f'| {spread(row["predicted_step_s"], scale=1e3)} '
      f'| {spread(row["hidden_fraction"], "{:.0%}")} |'
    )
  return lines


def pipe_table(report):
  """Pipe-SGD against max(Tp, Tc) of its own run, plus the pipeline refilled once per epoch.

  The loop waits at each epoch end for the gradient average still in flight (evaluation never
  runs beside a collective), so the first step of the next epoch has no allreduce to hide behind:
  over an epoch of S steps that costs min(Tp, Tc) once, min(Tp, Tc) / S per step.
  """
  lines = [
    '| target r | ms / step | Tp, Tc of the run ms | max(Tp, Tc) | epoch-end wait ms / step '
    '| + refill min(Tp, Tc) / S | measured / (max + refill) |',
    '|---|---|---|---|---|---|---|',
  ]
  for ratio in report['ratios']:
    runs = ratio['runs']['pipe_sgd']
    own = [max(r['Tp_s'], r['Tc_s']) for r in runs]
    refill = [min(r['Tp_s'], r['Tc_s']) / r['steps_per_epoch'] for r in runs]
    vs = [r['step_time_s'] / (m + f) for r, m, f in zip(runs, own, refill)]
    lines.append(
      f'| {ratio["target_r"]:g} | {spread([r["step_time_s"] for r in runs], scale=1e3)} '
      f'| {spread([r["Tp_s"] for r in runs], scale=1e3)}, '
      f'{spread([r["Tc_s"] for r in runs], scale=1e3)} | {spread(own, scale=1e3)} '
      f'| {spread([r["drain_s"] / r["steps"] for r in runs], scale=1e3)} '
      f'| {spread(refill, scale=1e3)} | {spread(vs, "{:.2f}")} |'
    )
  return lines


def _verdict(ok):
  return 'met' if ok else 'MISSED'


def target_lines(report):
  """The overlap targets, as ratios measured in the same repeat."""
  all_rows = [row for ratio in report['ratios'] for row in ratio['rows']]
  targets = []
  for row in all_rows:
    if row['algorithm'] == 'cocod_sgd':
      limit = 1.10 if row['target_r'] <= 1 else 1.15
      ok = statistics.median(row['round_vs_ideal']) <= limit
      targets.append(
        f'- r = {row["target_r"]:g}: CoCoD round time / max(k*Tp, Tc) = '
        f'{spread(row["round_vs_ideal"], "{:.2f}")} (target <= {limit:.2f}): {_verdict(ok)}'
      )
  by = {(r['target_r'], r['algorithm']): r for r in all_rows}
  ratios = [ratio['target_r'] for ratio in report['ratios']]
  for target in ratios:
    cocod, local = by[(target, 'cocod_sgd')], by[(target, 'local_sgd')]
    vs_local = [lo / co for lo, co in zip(local['step_time_s'], cocod['step_time_s'])]
    targets.append(
      f'- r = {target:g}: Local-SGD / CoCoD-SGD time per step = {spread(vs_local, "{:.2f}")} '
      f'(target > 1 in every run): {_verdict(min(vs_local) > 1.0)}'
    )
    if target == min(ratios):
      sp = cocod['speedup_vs_ssgd']
      targets.append(
        f'- r = {target:g}: CoCoD-SGD speedup over S-SGD = {spread(sp, "{:.2f}")}x '
        f'(target >= 1.6): {_verdict(statistics.median(sp) >= 1.6)}'
      )
  return targets


def overlap_lines(report):
  repeats = len(report['ratios'][0]['runs']['ssgd'])
  top = max(ratio['target_r'] for ratio in report['ratios'])
  lines = [f'## Overlap on the simulated link ({repeats} runs per row)', '']
  lines += table([row for ratio in report['ratios'] for row in ratio['rows']])
  lines += ['', f'### Where the background allreduce runs (CoCoD-SGD, r = {top:g})', '']
  lines += ['| comm.staging | ms / step | Tc ms | hidden |', '|---|---|---|---|']
  for staging, runs in report['stagings'].items():
    lines.append(
      f'| {staging} | {spread([r["step_time_s"] for r in runs], scale=1e3)} '
      f'| {spread([r["Tc_s"] for r in runs], scale=1e3)} '
      f'| {spread([r["hidden_fraction"] for r in runs], "{:.0%}")} |'
    )
  lines += ['', '### Pipe-SGD against its model', '']
  lines += pipe_table(report)
  lines += ['', '### Targets (ratios measured in the same repeat)', '']
  report['targets'] = target_lines(report)
  return lines + report['targets']


def overhead_lines(overhead):
  runs = overhead['runs']
  ratios = [r['ratio'] for r in runs]
  ok = statistics.median(ratios) <= 1.05
  return [
    f'## Loop overhead ({len(runs)} repeats, epochs 2-{overhead["epochs"]})',
    '',
    '| bare jitted loop ms / step | train_and_evaluate ms / step | ratio |',
    '|---|---|---|',
    f'| {spread([r["bare_ms"] for r in runs], "{:.3f}")} '
    f'| {spread([r["framework_ms"] for r in runs], "{:.3f}")} | {spread(ratios, "{:.3f}")} |',
    '',
    f'- framework / bare step time = {spread(ratios, "{:.3f}")} (target <= 1.05): {_verdict(ok)}',
  ]


def comm_lines(comm):
  lines = [
    '## The communicator beside raw mpi4py (2 ranks, median of the calls)',
    '',
    '| link | payload | MB | leaves | raw ms | weighted_mean ms | over raw | thread ms |',
    '|---|---|---|---|---|---|---|---|',
  ]
  targets = []
  for result in comm:
    for row in result['rows']:
      over = row['blocking_ms'] - row['raw_ms']
      lines.append(
        f'| {result["link"]} | {row["payload"]} | {row["bytes"] / 1e6:.2f} | {row["leaves"]} '
        f'| {row["raw_ms"]:.3f} | {row["blocking_ms"]:.3f} | +{over:.3f} ms '
        f'({row["blocking_ms"] / row["raw_ms"]:.2f}x) | {row["thread_ms"]:.3f} |'
      )
      if row['payload'] == 'cnn' and result['link'] == 'shared memory':
        targets.append(
          f'- fixed cost, {row["bytes"] / 1e3:.0f} KB over shared memory: '
          f'+{over:.3f} ms over raw (target <= 0.3 ms): {_verdict(over <= 0.3)}'
        )
      if row['payload'] == 'resnet18':
        ratio = row['blocking_ms'] / row['raw_ms']
        goal = result['link'] != 'shared memory'
        targets.append(
          f'- {row["bytes"] / 1e6:.1f} MB over {result["link"]}: {ratio:.2f}x raw '
          + (
            f'(target <= 1.10): {_verdict(ratio <= 1.10)}' if goal else '(no target: memory-bound)'
          )
        )
  return lines + [''] + targets


def checkpoint_lines(result):
  lines = [
    '## Checkpoint cost (ResNet18 train state: parameters, momentum, BatchNorm statistics)',
    '',
    '| workers | MB on disk | write s | restore s |',
    '|---|---|---|---|',
  ]
  for row in result['rows']:
    lines.append(
      f'| {row["workers"]} | {row["bytes"] / 1e6:.0f} | {spread(row["write_s"], "{:.2f}")} '
      f'| {spread(row["restore_s"], "{:.2f}")} |'
    )
  return lines


def predicted_hetero(algorithm, tp_slow, tc, k=K):
  """Time per global step of a mixed cluster (docs/algorithms.md): the slowest worker's step without
  balance; balanced (PS, AsynLocal-SGD) the homogeneous model with the balanced step, which on
  this cluster is the slow rank's: `tp_slow` either way."""
  return predicted_step(algorithm, tp_slow, tc, k)


def hetero_lines(hetero, calibration):
  """The mixed cluster's rows; the model from `calibration` (the slow rank's Tp: twice the
  calibrated one, as emulate_speeds makes it), never from the runs it predicts."""
  runs = hetero['runs']
  base = runs['S-SGD']
  tp, tc = calibrated(calibration, hetero['rate_kbit'])
  lines = [
    f'## Mixed cluster: rank 0 at half speed, {hetero["rate_kbit"] / 1000:.0f} Mbit/s '
    f'({len(base)} runs per row; model from the calibration: Tp_slow {2 * tp * 1e3:.1f} ms, '
    f'Tc {tc * 1e3:.1f} ms, r = {tc / (2 * tp):.2f})',
    '',
    '| algorithm | r = Tc/Tp_slow | ms / step | steps / epoch | s / epoch | epoch speedup vs S-SGD '
    '| model ms / step (calibration) | model epoch speedup | hidden |',
    '|---|---|---|---|---|---|---|---|---|',
  ]
  rows = {}
  for name, algorithm, ps in HETERO:
    rs = runs[name]
    slow = [b['ranks'][0]['Tp_s'] for b in base]
    tcs = [b['Tc_s'] for b in base]
    epoch = [r['step_time_s'] * r['steps_per_epoch'] for r in rs]
    base_epoch = [b['step_time_s'] * b['steps_per_epoch'] for b in base]
    model = [predicted_hetero(algorithm, 2 * tp, tc)] * len(rs)
    model_speedup = [
      predicted_hetero('ssgd', 2 * tp, tc) * b['steps_per_epoch'] / (m * r['steps_per_epoch'])
      for m, r, b in zip(model, rs, base)
    ]
    rows[name] = speedup = [b / e for b, e in zip(base_epoch, epoch)]
    lines.append(
      f'| {name} | {spread([tc / tp for tc, tp in zip(tcs, slow)], "{:.2f}")} '
      f'| {spread([r["step_time_s"] for r in rs], scale=1e3)} | {rs[0]["steps_per_epoch"]} '
      f'| {spread(epoch, "{:.2f}")} | {spread(speedup, "{:.2f}")}x '
      f'| {spread(model, scale=1e3)} | {spread(model_speedup, "{:.2f}")}x '
      f'| {spread([r["hidden_fraction"] for r in rs], "{:.0%}")} |'
    )
  co = rows['CoCoD-SGD+PS']
  return lines + [
    '',
    f'- CoCoD-SGD+PS epoch speedup over S-SGD without PS: {spread(co, "{:.2f}")}x (the model '
    f'column beside it; target: ahead, > 1): {_verdict(statistics.median(co) > 1.0)}',
  ]


def ranks_lines(ranks):
  """The multi-worker ranks' table and target: rows with medians and [min, max] over the runs,
  each speedup against the S-SGD run of the same repeat."""
  runs = ranks['runs']
  base = runs['ssgd']
  lines = [
    f'## Multi-worker ranks: 2 ranks x {ranks["workers_per_rank"]} workers, '
    f'{ranks["rate_kbit"] / 1000:.0f} Mbit/s ({len(base)} runs per row)',
    '',
    '| algorithm | r = Tc/Tp (S-SGD run) | ms / step | speedup vs S-SGD | Tp ms | local mean ms '
    '| Tc ms | hidden |',
    '|---|---|---|---|---|---|---|---|',
  ]
  speedups = {}
  for algo in RANKS_ALGOS:
    rs = runs[algo]
    speedups[algo] = [b['step_time_s'] / r['step_time_s'] for b, r in zip(base, rs)]
    lines.append(
      f'| {NAMES[algo]} | {spread([b["Tc_s"] / b["Tp_s"] for b in base], "{:.2f}")} '
      f'| {spread([r["step_time_s"] for r in rs], scale=1e3)} '
      f'| {spread(speedups[algo], "{:.2f}")}x | {spread([r["Tp_s"] for r in rs], scale=1e3)} '
      f'| {spread([r.get("Tl_s") for r in rs], scale=1e3)} '
      f'| {spread([r["Tc_s"] for r in rs], scale=1e3)} '
      f'| {spread([r["hidden_fraction"] for r in rs], "{:.0%}")} |'
    )
  sp = speedups['cocod_sgd']
  ranks['target'] = (
    f'- 2 x {ranks["workers_per_rank"]}: CoCoD-SGD speedup over S-SGD per step = '
    f'{spread(sp, "{:.2f}")}x (target >= 1.6): {_verdict(statistics.median(sp) >= 1.6)}'
  )
  return lines + ['', ranks['target']]


def provenance_lines(report):
  """Where each section was measured: one line when every section shares commit, tree, command
  and machine, else one line a section (`--sections=` measures some again and keeps the
  others)."""
  made = report.get('provenance') or {}
  if not made:
    return ['Measured: no provenance recorded (a bench.json from before it was kept).']

  def where(p):
    tree = {True: 'dirty', False: 'clean'}.get(p.get('dirty'), 'unknown')
    return f'commit {p["commit"][:12]} (tree {tree}), `{p["command"]}`, {p["machine"]}'

  sections = [s for s in SECTIONS if s in made]
  wheres = {where(made[s]) for s in sections}
  if len(wheres) == 1:
    dates = sorted(made[s]['date'] for s in sections)
    span = dates[0] if dates[0] == dates[-1] else f'{dates[0]} to {dates[-1]}'
    return [f'Measured at {wheres.pop()}; {span}.']
  return ['Measured section by section (the sections mix commits or machines):', ''] + [
    f'- {s}: {where(made[s])}; {made[s]["date"]}' for s in sections
  ]


def render(report):
  """bench.md's text from a report (what `measure` returns, or bench.json)."""
  lines = ['# Benchmark (median [min, max] over the runs)', '']
  lines += provenance_lines(report) + ['']
  if 'overhead' in report:
    lines += overhead_lines(report['overhead']) + ['']
  if 'comm' in report:
    lines += comm_lines(report['comm']) + ['']
  if 'checkpoint' in report:
    lines += checkpoint_lines(report['checkpoint']) + ['']
  if 'ratios' in report:
    lines += overlap_lines(report) + ['']
  if 'hetero' in report:
    lines += hetero_lines(report['hetero'], report['calibration']) + ['']
  if 'ranks' in report:
    lines += ranks_lines(report['ranks']) + ['']
  return '\n'.join(lines)


def _script(*args, timeout=1800):
  """Runs one of launch/'s measuring scripts; raises with its stderr on failure."""
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  p = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
  print(p.stdout, end='', flush=True)
  if p.returncode != 0:
    raise RuntimeError(f'{" ".join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}')


def measure_overhead(out):
  print('overhead (one process, bare loop against train_and_evaluate):', flush=True)
  path = os.path.join(out, 'overhead.json')
  _script(sys.executable, 'launch/bench_overhead.py', '--repeats=7', '--epochs=12', f'--out={path}')
  with open(path) as f:
    return json.load(f)


def measure_comm(out):
  results = []
  mpirun = [os.path.join(ROOT, 'launch', 'mpirun.sh'), '-np', '2', sys.executable]
  for name, prefix in (
    ('shm', []),
    ('link', [os.path.join(ROOT, 'launch', 'simnet.sh'), '--rate', FLAGS.comm_rate, '--']),
  ):
    print(f'communicator against raw mpi4py ({name}):', flush=True)
    path = os.path.join(out, f'comm_{name}.json')
    _script(*prefix, *mpirun, 'launch/bench_comm.py', f'--out={path}')
    with open(path) as f:
      results.append(json.load(f))
  return results


def measure_overlap(out, report):
  """The four algorithms at each target r, then the stagings at the largest."""
  a, b, tp = (report['calibration'][k] for k in ('a_s', 'b_s_kbit', 'Tp_s'))
  report['ratios'], rates = [], {}
  for target in [float(x) for x in FLAGS.ratios]:
    want = target * tp
    if want <= a:
      raise SystemExit(f'bench: r={target:g} needs Tc={want * 1e3:.1f} ms < the fitted floor')
    rates[target] = rate = b / (want - a)
    print(f'r = {target:g}: link rate {rate / 1000:.0f} Mbit/s', flush=True)
    by_algo = {algo: [] for algo in ALGOS}
    for rep in range(FLAGS.repeats):
      order = ALGOS[rep % len(ALGOS) :] + ALGOS[: rep % len(ALGOS)]
      for algo in order:
        wd = os.path.join(out, f'r{target:g}', f'rep{rep}', algo)
        by_algo[algo].append(run_job(wd, rate, algo))
    rows = summarize(by_algo, rate, target, report['calibration'])
    report['ratios'].append({'target_r': target, 'rate_kbit': rate, 'runs': by_algo, 'rows': rows})
    dirs = [os.path.join(out, f'r{target:g}', 'rep0', algo) for algo in ALGOS]
    png = os.path.join(out, f'timeline_r{target:g}.png')
    plot_timeline.plot(dirs, [NAMES[x] for x in ALGOS], png, title=f'r = {target:g}')
  top = max(rates)
  report['stagings'] = {}
  print(f'staging comparison, CoCoD-SGD at r = {top:g}:', flush=True)
  for rep in range(FLAGS.repeats):
    for staging in FLAGS.stagings:
      wd = os.path.join(out, 'staging', f'rep{rep}', staging)
      tm = run_job(wd, rates[top], 'cocod_sgd', f'--config.comm.staging={staging}')
      report['stagings'].setdefault(staging, []).append(tm)


def measure_hetero(out, report):
  """The mixed cluster at r = Tc / Tp_slow of about 1 (Tp_slow: twice the calibrated Tp)."""
  a, b, tp = (report['calibration'][k] for k in ('a_s', 'b_s_kbit', 'Tp_s'))
  rate = b / (2 * tp - a)
  write_data(os.path.join(out, 'hetero.npz'), n_train=30720)
  print(f'mixed cluster (rank 0 at half speed), link {rate / 1000:.0f} Mbit/s:', flush=True)
  runs = {name: [] for name, _, _ in HETERO}
  for rep in range(FLAGS.repeats):
    for name, algorithm, ps in HETERO[rep % len(HETERO) :] + HETERO[: rep % len(HETERO)]:
      wd = os.path.join(out, 'hetero', f'rep{rep}', name.replace('+', '_'))
      extra = HETERO_FLAGS + (f'--config.proportional_sampling={ps}',)
      runs[name].append(run_job(wd, rate, algorithm, *extra, data='hetero.npz', label=name))
  report['hetero'] = {'rate_kbit': rate, 'runs': runs}


def measure_ranks(out, report):
  """2 ranks x RANKS_WIDTH workers, S-SGD and CoCoD-SGD at r of about 1 (see the docstring)."""
  a, b = (report['calibration'][k] for k in ('a_s', 'b_s_kbit'))
  if not os.path.exists(os.path.join(out, 'synthetic.npz')):
    write_data(os.path.join(out, 'synthetic.npz'))
  print(f'2 ranks x {RANKS_WIDTH} workers: probe (S-SGD) for Tp:', flush=True)
  fast = float(FLAGS.probe_rates_mbit[-1]) * 1000
  probe = run_job(os.path.join(out, 'ranks', 'probe'), fast, 'ssgd', *RANKS_FLAGS)
  if probe['Tp_s'] <= a:
    raise SystemExit(f'bench: Tp={probe["Tp_s"] * 1e3:.1f} ms is below the fitted Tc floor')
  rate = b / (probe['Tp_s'] - a)
  print(f'r = 1: link rate {rate / 1000:.0f} Mbit/s', flush=True)
  runs = {algo: [] for algo in RANKS_ALGOS}
  for rep in range(FLAGS.repeats):
    for algo in RANKS_ALGOS if rep % 2 == 0 else RANKS_ALGOS[::-1]:
      wd = os.path.join(out, 'ranks', f'rep{rep}', algo)
      runs[algo].append(run_job(wd, rate, algo, *RANKS_FLAGS))
  report['ranks'] = {
    'workers_per_rank': RANKS_WIDTH,
    'rate_kbit': rate,
    'probe': probe,
    'runs': runs,
  }
  dirs = [os.path.join(out, 'ranks', 'rep0', algo) for algo in RANKS_ALGOS]
  png = os.path.join(out, 'timeline_ranks.png')
  plot_timeline.plot(dirs, [NAMES[x] for x in RANKS_ALGOS], png, title=f'2 x {RANKS_WIDTH}, r = 1')


def measure(out, sections, report):
  """The runs of the chosen sections, into `report` (bench.json's content, holding the sections
  of an earlier run that were not chosen again, each with its own provenance); returns it."""
  made = report.setdefault('provenance', {})
  for section in sections:
    made[section] = provenance.record()
  if 'overhead' in sections:
    report['overhead'] = measure_overhead(out)
  if 'comm' in sections:
    report['comm'] = measure_comm(out)
  if 'checkpoint' in sections:
    print('checkpoint cost:', flush=True)
    path = os.path.join(out, 'checkpoint.json')
    _script(sys.executable, 'launch/bench_checkpoint.py', f'--out={path}')
    with open(path) as f:
      report['checkpoint'] = json.load(f)
  later = {'hetero', 'ranks'} & set(sections)  # Sections that reuse an earlier calibration.
  if 'overlap' in sections or (later and 'calibration' not in report):
    write_data(os.path.join(out, 'synthetic.npz'))
    print('calibration (S-SGD at two link rates):', flush=True)
    a, b, tp, cal = calibrate(out)
    print(
      f'  Tc = {a * 1e3:.1f} ms + {b:.0f} ms*kbit/s / rate,  Tp = {tp * 1e3:.1f} ms', flush=True
    )
    report['calibration'] = {'a_s': a, 'b_s_kbit': b, 'Tp_s': tp, 'runs': cal}
  elif later:
    print('calibration: that of the earlier run in bench.json', flush=True)
  if 'overlap' in sections:
    measure_overlap(out, report)
  if 'hetero' in sections:
    measure_hetero(out, report)
  if 'ranks' in sections:
    measure_ranks(out, report)
  return report


def main(argv):
  del argv
  out = FLAGS.out
  unknown = sorted(set(FLAGS.sections) - set(SECTIONS))
  if unknown:
    errors.fail(f'bench: --sections has {unknown}; allowed: {list(SECTIONS)}', errors.EXIT_USAGE)
  if FLAGS.render_only:
    path = os.path.join(out, 'bench.json')
    if not os.path.exists(path):
      errors.fail(f'bench: --render_only needs {path} from an earlier run', errors.EXIT_USAGE)
    with open(path) as f:
      report = json.load(f)
  else:
    if os.geteuid() != 0:
      errors.fail(
        'bench: the simulated network needs root (network namespaces and tc); run as root'
      )
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, 'bench.json')
    report = {}
    if set(FLAGS.sections) != set(SECTIONS) and os.path.exists(path):
      with open(path) as f:  # Some sections measured again; the others kept.
        report = json.load(f)
    report = measure(out, FLAGS.sections, report)
  text = render(report)
  print('\n' + text)
  files.write_atomic(os.path.join(out, 'bench.md'), text)
  files.write_json_atomic(os.path.join(out, 'bench.json'), report)


if __name__ == '__main__':
  app.run(main, flags_parser=lambda a: cocod_flags.parse(a, 'bench'))
