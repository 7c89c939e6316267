"""`python -m cocod_jax.experiments.corrections`: CoCoD-SGD's corrections and compressed snapshot
allreduce side by side (issue 23; configs/corrections.py).

    python -m cocod_jax.experiments.corrections --parallel=2 --task=c100_r18 \
        --timing_links=12mbit/8kb/8000,3.5mbit/8kb/8000 --timing_seeds=2

The accuracy runs (one-host cluster, 5 seeds): every variant's final averaged model paired with
S-SGD's by seed and test example, the registered procedure of the tables (margin 0.5 point, 90%
interval), with the bytes a sender puts on the wire a round and the rounding error of the
compressed average against the float32 one. Then, per link of --timing_links, the timing runs
(real MPI over the shaped link, 2 ranks of 8 workers, --timing_seeds runs each, seeds 0, 1, ...)
of the variants in `configs.corrections.TIMED`: the time to the target set by the rule of the
tables (S-SGD's mean final accuracy over the accuracy runs - 0.5 point), the time per epoch,
r = Tc / Tp of each run and the bytes a rank hands to MPI a round (medians over the runs, with
their range; `timing.timing_summary`). Writes corrections.md, .json, .png and
corrections_correct.npz (the per-example correctness of every run a verdict used) into
--workdir.
"""

import os
import statistics

import numpy as np

from cocod_jax.experiments import accuracy
from cocod_jax.experiments import artefacts
from cocod_jax.experiments import common
from cocod_jax.experiments import correctness
from cocod_jax.experiments import figures
from cocod_jax.experiments import timing
from configs import corrections as config
from configs import scales

FLAGS = common.FLAGS
TIMED = config.TIMED


def as_rows(points):
  for p in points:  # The accuracy helpers group runs by `algo`: here each variant is a row.
    p.arg['algo'] = p.arg['variant']
  return points


def float32_bytes(point) -> int | None:
  """Bytes of the float32 snapshot a worker holds (parameters and BatchNorm statistics: what a
  sender of the uncompressed allreduce puts on the wire a round, flags aside)."""
  path = os.path.join(point.directory, 'final_params.npz')
  if not os.path.exists(path):
    return None
  with np.load(path) as f:
    return 4 * sum(f[k].size for k in f.files if k.startswith(('params/', 'batch_stats/')))


def accuracy_rows(points, task: str, variants=None) -> tuple[list[dict], dict]:
  """One row per variant (S-SGD aside): its finals, the paired verdict, bytes and rounding; and
  {variant: [seeds, examples] correctness} of every run a verdict used, in its `pairs` order
  (S-SGD's in its own seeds' order). `variants`: those to row (default: configs/corrections.py's;
  the overlap experiment passes its own), each paired with the points' S-SGD (`ssgd`) runs."""
  reference = accuracy.by_seed(points, config.REFERENCE, task)
  known = {}  # Each run's correctness, read once: S-SGD's runs pair with every row.

  def correct_of(point):
    if point.directory not in known:
      known[point.directory] = accuracy.of_point(point)
    return known[point.directory]

  arrays = {}
  rows = []
  for variant in config.VARIANTS if variants is None else variants:
    if variant == config.REFERENCE:
      continue
    mine = [p for p in points if p.arg['algo'] == variant and p.arg['task'] == task]
    runs = accuracy.by_seed(mine, variant, task)
    diverged = sum(1 for p in mine if p.state == 'DIVERGED')
    finished = {s: p for s, p in runs.items() if p.results.get('status') == 'completed'}
    check = {'verdict': 'diverged'}
    if not diverged:
      check = accuracy.compare_cell(finished, reference, correct_of)
      if check['paired_by'] == 'seed and test example':
        arrays[variant] = np.stack([correct_of(finished[s]) for s in check['pairs']])
    finals = [accuracy.final(p) for p in finished.values()]
    squeezed = [p.results.get('snapshot_allreduce') or {} for p in finished.values()]
    sample = next(iter(finished.values()), None)
    rows.append({
      'variant': variant,
      'runs': len(mine),
      'diverged': diverged,
      'final': finals,
      'final_mean': statistics.mean(finals) if finals else None,
      'payload_bytes': squeezed[0].get('payload_bytes') if squeezed and squeezed[0] else (
        float32_bytes(sample) if sample else None),
      'update_rel_error': _mean([s.get('update_rel_error') for s in squeezed]),
      'model_rel_error': _mean([s.get('model_rel_error') for s in squeezed]),
      **check,
    })  # fmt: skip
  if reference and all(correct_of(p) is not None for p in reference.values()):
    arrays[config.REFERENCE] = np.stack([correct_of(reference[s]) for s in sorted(reference)])
  return rows, arrays


def _mean(values):
  values = [v for v in values if v is not None]
  return statistics.mean(values) if values else None


def timed_runs(points, variants, with_epochs: bool = False) -> tuple[dict, list]:
  """The timing runs by variant (`as_rows` applied): S-SGD's {seed: results} and [(variant,
  {seed: results})] of each of `variants` with a run, in their order; a point counts with its
  results (`with_epochs`: and at least one epoch in them)."""
  by_variant = {}
  for p in points:
    if p.results and (p.results.get('epochs') or not with_epochs):
      by_variant.setdefault(p.arg['algo'], {})[p.arg['seed']] = p.results
  base = by_variant.get(config.REFERENCE, {})
  return base, [(v, by_variant[v]) for v in variants if by_variant.get(v)]


def timing_rows(points, target: float | None) -> list[dict]:
  """One row per timed variant over its timing runs (one per seed; `timing.timing_summary`):
  time to `target`, per epoch, r and bytes."""
  base, timed = timed_runs(points, TIMED)
  rows = []
  for variant, runs in timed:
    squeezed = next(iter(runs.values())).get('snapshot_allreduce') or {}
    rows.append({
      'variant': variant,
      **timing.timing_summary(runs, base, target),
      'status': sorted({r.get('status') for r in runs.values()}),
      'payload_bytes': squeezed.get('payload_bytes'),
    })  # fmt: skip
  return rows


def _fmt(v, f):
  return '-' if v is None else f.format(v)


def render(task, acc_rows, reference_finals, timed, target) -> str:
  title = f'Corrections and compressed snapshot allreduce, {scales.task_title(task, "cpu")}'
  n_ref = len(reference_finals)
  lines = [
    f'# {title}',
    '',
    '![corrections](corrections.png)',
    '',
    f'Accuracy: the one-host cluster of 16 workers, every worker its own sender; S-SGD '
    f'{statistics.mean(reference_finals):.2f}% (mean of {n_ref} seeds). Each variant against '
    "S-SGD, paired by seed and test example, the tables' registered procedure (margin 0.5 point, "
    '90% interval). Bytes: what one sender puts on the wire a round (float32: the snapshot; '
    'compressed: payload and scales). Rounding: the root of the summed squared error of the '
    'compressed average against the float32 one, relative to the round updates and to the '
    'model.',
    '',
    '| variant | seeds | final % (mean) | difference to S-SGD | 90% interval | verdict | bytes '
    '/ round | rounding / update | rounding / model |',
    '|---|---|---|---|---|---|---|---|---|',
  ]
  for r in acc_rows:
    if r['verdict'] in ('diverged', 'no pairs'):
      lines.append(
        f'| {r["variant"]} | {r["runs"]} | {_fmt(r["final_mean"], "{:.2f}")} | - | - '
        f'| {r["verdict"]} ({r["diverged"]} of {r["runs"]} diverged) '
        f'| {_fmt(r["payload_bytes"], "{:,}")} | - | - |'
      )
      continue
    lines.append(
      f'| {r["variant"]} | {r["seeds"]} | {r["final_mean"]:.2f} | {r["difference"]:+.2f} '
      f'| [{r["lo"]:+.2f}, {r["hi"]:+.2f}] | {r["verdict"]} | {_fmt(r["payload_bytes"], "{:,}")} '
      f'| {_fmt(r["update_rel_error"], "{:.2%}")} | {_fmt(r["model_rel_error"], "{:.3%}")} |'
    )
  for link, rows in timed.items():
    runs = sorted({r['runs'] for r in rows})
    lines += [
      '',
      f'Time on the link {link}: real MPI, 2 ranks of 8 workers (a compressed message per rank), '
      f'{"/".join(map(str, runs))} run(s) per variant (seeds 0, 1, ...). Target '
      f'{_fmt(target, "{:.2f}")}% (S-SGD mean final - 0.5). With more than one run: the median '
      "and, in brackets, the lowest and highest; a speedup is the median of the ratios to S-SGD's "
      "run of the same seed. r: the run's own Tc / Tp (Tc of its snapshot allreduce; S-SGD: of "
      'its gradient allreduce). Bytes: what a rank hands to MPI a round (payload, scales, flags).',
      '',
      '| variant | runs | final % | time to target (s) | speedup over S-SGD | s / epoch | epoch '
      'speedup | r | hidden | bytes / round |',
      '|---|---|---|---|---|---|---|---|---|---|',
    ]
    for r in rows:
      reached = timing.spread(r['time_s'], r['time_range'], '{:.1f}')
      if r['reached'] < r['runs']:
        reached = 'not reached' if not r['reached'] else f'{r["reached"]} of {r["runs"]} reached'
      lines.append(
        f'| {r["variant"]} | {r["runs"]} | {_fmt(r["final"], "{:.2f}")} | {reached} '
        f'| {timing.spread(r["speedup"], r["speedup_range"], "{:.2f}x")} '
        f'| {timing.spread(r["epoch_s"], r["epoch_range"], "{:.3f}")} '
        f'| {timing.spread(r["epoch_speedup"], r["epoch_speedup_range"], "{:.2f}x")} '
        f'| {timing.spread(r["r"], r["r_range"], "{:.2f}")} '
        f'| {_fmt(r["hidden"], "{:.0%}")} | {_fmt(r["payload_bytes"], "{:,}")} |'
      )
  return '\n'.join(lines) + '\n'


def draw(task, acc_rows, timed_points, title):
  """The figure on a grid of two columns: first each variant's difference to S-SGD with its
  interval (the axis set by the bulk, an outlier at its edge with its value:
  `figures.differences`); then a panel per link, the slowest first: test accuracy against
  training time, one line per timed variant and seed."""
  fig, axes = figures.grid(1 + len(timed_points), width=6.0, height=4.2)
  ax = axes[0]
  shown = [r for r in acc_rows if r.get('difference') is not None]
  style = {'fmt': 'o', 'color': 'C0'}
  figures.differences(ax, [(x, r['difference'], r['lo'], r['hi'], style)
                           for x, r in enumerate(shown)])  # fmt: skip
  figures.variant_axis(ax, [r['variant'] for r in shown])
  ax.set_title(f'{scales.task_title(task, "cpu")}: accuracy against S-SGD', fontsize=9)
  for ax, link in zip(axes[1:], figures.by_rate(timed_points)):
    for i, variant in enumerate(TIMED):
      runs = [q for q in timed_points[link] if q.arg['algo'] == variant and q.results]
      for j, p in enumerate(sorted(runs, key=lambda q: int(q.arg['seed']))):
        epochs = p.results['epochs']
        ax.plot([e['train_time_s'] for e in epochs], [100 * e['test_accuracy'] for e in epochs],
                label=variant if j == 0 else None, color=f'C{i}', alpha=1.0 if j == 0 else 0.5,
                lw=1.2 if j == 0 else 0.8)  # fmt: skip
    ax.set_xlabel('training time (s), evaluation excluded')
    ax.set_ylabel('test accuracy (%)')
    ax.set_title(f'MPI 2 x 8, {link}', fontsize=9)
    ax.grid(alpha=0.3)
  figures.legend(fig, axes)
  fig.suptitle(title, fontsize=10)
  return fig


def plot(task, acc_rows, timed_points, title) -> str:
  """Writes corrections.png (`draw`) into --workdir; its path. The timing panels draw the runs'
  epochs, which corrections.json does not hold: the figure is drawn from the runs only."""
  return common.save_figure(draw(task, acc_rows, timed_points, title), 'corrections')


def make() -> int:
  """Runs (or reads) the accuracy runs and each link's timing runs, and writes the artefact."""
  task = FLAGS.task
  seeds = FLAGS.seeds or 5
  points = common.run(config, f'task={task},seeds={seeds}')
  if points is None:  # A dry run or a Slurm submission: the runner said what it would do.
    return 0
  points = as_rows(points)
  acc_rows, arrays = accuracy_rows(points, task)
  reference = accuracy.by_seed(points, config.REFERENCE, task)
  finals = [accuracy.final(p) for p in reference.values()]
  target = statistics.mean(finals) - accuracy.MARGIN if finals else None
  timed, timed_points, everything = {}, {}, list(points)
  for link in FLAGS.timing_links:
    arg = f'task={task},seeds={FLAGS.timing_seeds},timing=true'
    run = common.run(config, arg, timing=True, link=link)
    if run is None:
      return 0
    run = [p for p in as_rows(run) if p.arg['algo'] in TIMED]
    timed[link], timed_points[link] = timing_rows(run, target), run
    everything += run
  title = f'Corrections and compressed snapshot allreduce, {scales.task_title(task, "cpu")}'
  text = render(task, acc_rows, finals, timed, target)
  print(text)
  plot(task, acc_rows, timed_points, title)
  data = {
    'task': task,
    'target': target,
    'reference_final': finals,
    'reference_seeds': sorted(reference),
    'accuracy': acc_rows,
    'timing': timed,
    'timed': list(TIMED),
    **common.provenance(everything, 'one_host+mpi'),
  }
  common.write('corrections', text, data)
  common.write_npz('corrections_correct', correctness.pack(arrays))
  return 0 if all(p.state in ('DONE', 'DIVERGED') for p in everything) else 1


def main():
  artefacts.entry('corrections', make)


if __name__ == '__main__':
  main()
