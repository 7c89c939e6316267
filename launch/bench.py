"""`make bench`: the four algorithms on a simulated network, measured (needs root for the netns).

    .venv/bin/python launch/bench.py --out=runs/bench [--repeats=3] [--ratios=1,3]

Every job is `configs/bench.py` on 2 MPI ranks inside `launch/simnet.sh`, whose loopback is
rate-limited, so the allreduce really crosses a slow link. Steps:

1. Calibration: S-SGD (nothing overlaps, so its Tp and Tc are clean) at two link rates; a fit
   `Tc = a + b / rate` gives the rate for each target `r = Tc/Tp`.
2. For each target r, `--repeats` rounds of the four algorithms (order rotated each repeat).
   Each row reports the measured time per step, the speedup over the S-SGD run of the same
   repeat, the time model of ALGORITHMS.md for that S-SGD run's Tp and Tc, and the hidden
   fraction: medians with [min, max] over the repeats.
3. At the largest r, CoCoD-SGD with each `comm.staging` (where the background allreduce runs).
4. Pipe-SGD against its model with the run's own Tp and Tc, and the cost of the pipeline being
   emptied at each epoch end (before evaluation) and refilled.
5. The targets of the overlap issue, as measured ratios, and a PNG of one measured round per
   algorithm (launch/plot_timeline.py).

Writes `bench.json` (every run's timing), `bench.md` (the tables) and `timeline_r<r>.png`;
`--render_only` rewrites the tables from an existing bench.json without running anything.
"""

import json
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from launch import plot_timeline  # noqa: E402

ALGOS = ('ssgd', 'pipe_sgd', 'local_sgd', 'cocod_sgd')
NAMES = dict(ssgd='S-SGD', pipe_sgd='Pipe-SGD', local_sgd='Local-SGD', cocod_sgd='CoCoD-SGD')
K = 5  # configs/bench.py's period.

flags.DEFINE_string('out', 'runs/bench', 'Output directory.')
flags.DEFINE_integer('repeats', 3, 'Runs per algorithm and ratio.')
flags.DEFINE_list('ratios', ['1', '3'], 'Target values of r = Tc/Tp.')
flags.DEFINE_list('probe_rates_mbit', ['300', '1200'], 'Link rates of the calibration runs.')
flags.DEFINE_list('stagings', ['host', 'device', 'numpy'], 'comm.staging values to compare.')
flags.DEFINE_bool(
  'render_only', False, 'Rewrite bench.md from the bench.json in --out; run nothing.'
)
FLAGS = flags.FLAGS


def predicted_step(algorithm, tp, tc, k=K):
  """Section 4.2's time per step for measured Tp and Tc (ALGORITHMS.md, the time model)."""
  return {
    'ssgd': tp + tc,
    'local_sgd': tp + tc / k,
    'pipe_sgd': max(tp, tc),
    'cocod_sgd': max(tp, tc / k),
  }[algorithm]


def write_data(path, n_train=20480, n_test=2048, dim=64, classes=10, seed=0):
  """A learnable synthetic set: labels of a random linear teacher, with noise."""
  rs = np.random.RandomState(seed)
  x = rs.randn(n_train + n_test, dim).astype(np.float32)
  teacher = rs.randn(dim, classes)
  y = np.argmax(x @ teacher + 0.5 * rs.randn(len(x), classes), axis=1).astype(np.int32)
  np.savez(path, x_train=x[:n_train], y_train=y[:n_train], x_test=x[n_train:], y_test=y[n_train:])


def run_job(workdir, rate_kbit, algorithm, *extra):
  """One training job on the shaped link; returns results.json's `timing`."""
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
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
    f'--config.dataset.path={FLAGS.out}/synthetic.npz',
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
    f'  {NAMES[algorithm]:9s} {rate_kbit / 1000:7.0f} Mbit/s  '
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


def summarize(runs_by_algo, rate_kbit, target):
  """Rows of one ratio: medians and [min, max] over the repeats."""
  ssgd = runs_by_algo['ssgd']
  rows = []
  for algo in ALGOS:
    runs = runs_by_algo[algo]
    steps = [r['step_time_s'] for r in runs]
    speedups = [s['step_time_s'] / r['step_time_s'] for s, r in zip(ssgd, runs)]
    pred = [predicted_step(algo, s['Tp_s'], s['Tc_s']) for s in ssgd]
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
    '| model ms / step | hidden |',
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


def target_lines(report):
  """The overlap issue's targets, as ratios measured in the same repeat."""
  all_rows = [row for ratio in report['ratios'] for row in ratio['rows']]
  targets = []
  for row in all_rows:
    if row['algorithm'] == 'cocod_sgd':
      ok = statistics.median(row['round_vs_ideal']) <= 1.15
      targets.append(
        f'- r = {row["target_r"]:g}: CoCoD round time / max(k*Tp, Tc) = '
        f'{spread(row["round_vs_ideal"], "{:.2f}")} (target <= 1.15): {"met" if ok else "MISSED"}'
      )
  by = {(r['target_r'], r['algorithm']): r for r in all_rows}
  ratios = [ratio['target_r'] for ratio in report['ratios']]
  for target in ratios:
    cocod, local = by[(target, 'cocod_sgd')], by[(target, 'local_sgd')]
    vs_local = [lo / co for lo, co in zip(local['step_time_s'], cocod['step_time_s'])]
    ok = min(vs_local) > 1.0
    targets.append(
      f'- r = {target:g}: Local-SGD / CoCoD-SGD time per step = {spread(vs_local, "{:.2f}")} '
      f'(target > 1 in every run): {"met" if ok else "MISSED"}'
    )
    if target == min(ratios):
      sp = cocod['speedup_vs_ssgd']
      ok = statistics.median(sp) >= 1.6
      targets.append(
        f'- r = {target:g}: CoCoD-SGD speedup over S-SGD = {spread(sp, "{:.2f}")}x '
        f'(target >= 1.6): {"met" if ok else "MISSED"}'
      )
  return targets


def render(report):
  """bench.md's text from a report (what `measure` returns, or bench.json)."""
  repeats = len(report['ratios'][0]['runs']['ssgd'])
  top = max(ratio['target_r'] for ratio in report['ratios'])
  lines = [f'# Benchmark ({repeats} runs per row; median [min, max])', '']
  lines += table([row for ratio in report['ratios'] for row in ratio['rows']])
  lines += ['', f'## Where the background allreduce runs (CoCoD-SGD, r = {top:g})', '']
  lines += ['| comm.staging | ms / step | Tc ms | hidden |', '|---|---|---|---|']
  for staging, runs in report['stagings'].items():
    lines.append(
      f'| {staging} | {spread([r["step_time_s"] for r in runs], scale=1e3)} '
      f'| {spread([r["Tc_s"] for r in runs], scale=1e3)} '
      f'| {spread([r["hidden_fraction"] for r in runs], "{:.0%}")} |'
    )
  lines += ['', '## Pipe-SGD against its model', '']
  lines += pipe_table(report)
  lines += ['', '## Targets (ratios measured in the same repeat)', '']
  report['targets'] = target_lines(report)
  lines += report['targets']
  return '\n'.join(lines) + '\n'


def measure(out):
  """Every run of the benchmark; returns the report (bench.json's content)."""
  write_data(os.path.join(out, 'synthetic.npz'))
  print('calibration (S-SGD at two link rates):', flush=True)
  a, b, tp, cal = calibrate(out)
  print(f'  Tc = {a * 1e3:.1f} ms + {b:.0f} ms*kbit/s / rate,  Tp = {tp * 1e3:.1f} ms', flush=True)
  report = {'calibration': {'a_s': a, 'b_s_kbit': b, 'Tp_s': tp, 'runs': cal}, 'ratios': []}
  rates = {}
  for target in [float(x) for x in FLAGS.ratios]:
    want = target * tp
    if want <= a:
      raise SystemExit(f'bench: r={target:g} needs Tc={want * 1e3:.1f} ms < the fitted floor')
    rate = b / (want - a)
    rates[target] = rate
    print(f'r = {target:g}: link rate {rate / 1000:.0f} Mbit/s', flush=True)
    by_algo = {algo: [] for algo in ALGOS}
    for rep in range(FLAGS.repeats):
      order = ALGOS[rep % len(ALGOS) :] + ALGOS[: rep % len(ALGOS)]
      for algo in order:
        wd = os.path.join(out, f'r{target:g}', f'rep{rep}', algo)
        by_algo[algo].append(run_job(wd, rate, algo))
    rows = summarize(by_algo, rate, target)
    report['ratios'].append({'target_r': target, 'rate_kbit': rate, 'runs': by_algo, 'rows': rows})
    dirs = [os.path.join(out, f'r{target:g}', 'rep0', algo) for algo in ALGOS]
    png = os.path.join(out, f'timeline_r{target:g}.png')
    plot_timeline.plot(dirs, [NAMES[x] for x in ALGOS], png, title=f'r = {target:g}')

  top = max(rates)
  stagings = {}
  print(f'staging comparison, CoCoD-SGD at r = {top:g}:', flush=True)
  for rep in range(FLAGS.repeats):
    for staging in FLAGS.stagings:
      wd = os.path.join(out, 'staging', f'rep{rep}', staging)
      tm = run_job(wd, rates[top], 'cocod_sgd', f'--config.comm.staging={staging}')
      stagings.setdefault(staging, []).append(tm)
  report['stagings'] = stagings
  return report


def main(argv):
  del argv
  out = FLAGS.out
  if FLAGS.render_only:
    path = os.path.join(out, 'bench.json')
    if not os.path.exists(path):
      raise SystemExit(f'bench: --render_only needs {path} from an earlier run')
    with open(path) as f:
      report = json.load(f)
  else:
    if os.geteuid() != 0:
      sys.exit('bench: the simulated network needs root (network namespaces and tc); run as root')
    os.makedirs(out, exist_ok=True)
    report = measure(out)
  text = render(report)
  print('\n' + text)
  for name, content in (('bench.md', text), ('bench.json', json.dumps(report, indent=2))):
    tmp = os.path.join(out, name + '.tmp')
    with open(tmp, 'w') as f:
      f.write(content)
    os.replace(tmp, os.path.join(out, name))


if __name__ == '__main__':
  app.run(main)
