"""The streamed experiment's analysis (issue 40; docs/paper-cpu/PREREGISTRATION.md, amendment 6):
each accuracy stage's paired verdicts against S-SGD and differences to Local-SGD, the 120-epoch
reruns against the committed long_schedule runs of the same cell and seed, the timing rows on each
link, the mixed cluster, every run's provenance, and `assemble`, the dict
streamed.json holds. What fits of the overlap experiment's analysis is reused from it
(`overlap_analysis`: stage_rows, versus_local, timing_rows, pareto, assemble_mixed); targets
(a)-(d): streamed_targets.py."""

import os
import statistics

from cocod_jax.experiments import accuracy
from cocod_jax.experiments import common
from cocod_jax.experiments import corrections
from cocod_jax.experiments import overlap_analysis as shared
from cocod_jax.experiments import streamed_targets as targets
from cocod_jax.record import files
from configs import streamed as config

COMMITTED = os.path.join(
  os.path.dirname(__file__), '..', '..', 'docs', 'paper-cpu', 'long_schedule.json'
)
RERUN = ('ssgd', 'local_sgd', 'cocod')  # The 120-epoch variants long_schedule.json holds.
CURVES = ('test_accuracy', 'avg_train_loss', 'train_loss')  # As long_schedule keeps them.


def accuracy_part(points, tasks, variants) -> dict:
  """One accuracy stage: the verdicts against S-SGD (`stage_rows`), S-SGD's finals and each
  variant's difference to Local-SGD paired by seed (`versus_local`), per column."""
  others = [v for v in variants if v not in (config.REFERENCE, 'local_sgd')]
  return {
    'tasks': list(tasks),
    'variants': list(variants),
    'seeds': sorted({int(p.arg['seed']) for p in points}),
    'rows': shared.stage_rows(points, tasks, variants),
    'ssgd': shared.finals_of(points, tasks),
    'vs_local': {t: {v: shared.versus_local(points, t, v) for v in others} for t in tasks},
  }


def committed_runs(path: str = COMMITTED) -> dict | None:
  """The committed long_schedule artefact, or None where it is not there."""
  return files.read_json(path)


def _committed_finals(committed: dict, task: str, variant: str) -> dict:
  """{seed: final accuracy %} of the committed runs of a cell: Local-SGD's and CoCoD-SGD's from
  their verdict rows (finals in the order of their seeds), S-SGD's from the last epoch of its
  curves (S-SGD's final model is its last epoch's; the json keeps no S-SGD row)."""
  if variant == config.REFERENCE:
    curves = committed.get('curves', {}).get(task, {}).get(variant, {})
    return {int(s): 100.0 * c['test_accuracy'][-1] for s, c in curves.items() if c['test_accuracy']}
  row = committed.get('long', {}).get(task, {}).get(variant, {}).get('final') or {}
  finals, seeds = row.get('final') or [], row.get('pairs') or []
  return dict(zip(seeds, finals)) if len(finals) == len(seeds) else {}


def _committed_mean(committed: dict, task: str, variant: str) -> float | None:
  if variant == config.REFERENCE:
    return (committed.get('ssgd', {}).get(task) or {}).get('mean')
  row = committed.get('long', {}).get(task, {}).get(variant, {}).get('final') or {}
  return row.get('final_mean')


def _same(a, b) -> bool:
  """Equal to the last digit the committed artefact gives (0.001 point: 3 decimals)."""
  return a is not None and b is not None and round(a, 3) == round(b, 3)


def against_committed(points, committed: dict, tasks) -> dict:
  """{task: {variant: ...}}: each 120-epoch rerun of S-SGD, Local-SGD and CoCoD-SGD beside the
  committed long_schedule run of its cell and seed: the final accuracies, whether they are equal
  to the last digit, whether every epoch's curves (test accuracy and both training losses, to 5
  digits, as long_schedule keeps them) are, and the largest difference of the test accuracy."""
  out = {}
  for t in tasks:
    out[t] = {}
    for v in RERUN:
      mine = accuracy.by_seed(points, v, t)
      finals = _committed_finals(committed, t, v)
      curves = committed.get('curves', {}).get(t, {}).get(v, {})
      seeds = []
      for s in sorted(mine):
        epochs = mine[s].results['epochs']
        old = curves.get(str(s)) or {}
        new = {f: [None if e.get(f) is None else round(e[f], 5) for e in epochs] for f in CURVES}
        acc_old = old.get('test_accuracy') or []
        gaps = [100 * abs(a - b) for a, b in zip(new['test_accuracy'], acc_old)
                if a is not None and b is not None]  # fmt: skip
        seeds.append({
          'seed': s,
          'final': accuracy.final(mine[s]),
          'committed_final': finals.get(s),
          'final_equal': _same(accuracy.final(mine[s]), finals.get(s)),
          'curves_equal': bool(old) and all(new[f] == old.get(f) for f in CURVES if f in old),
          'epochs_differing': sum(g > 0 for g in gaps) + abs(len(acc_old) - len(epochs)),
          'largest_difference': max(gaps) if gaps else None,
        })  # fmt: skip
      mean = statistics.mean(s['final'] for s in seeds) if seeds else None
      committed_mean = _committed_mean(committed, t, v)
      out[t][v] = {
        'seeds': seeds,
        'mean': mean,
        'committed_mean': committed_mean,
        'mean_equal': _same(mean, committed_mean),
        'equal': bool(seeds)
        and len(seeds) == len(finals)
        and all(s['final_equal'] and s['curves_equal'] for s in seeds),
      }
  return out


def _run_details(points, variants) -> dict:
  """{variant: the tau each run used, a fragment's Tc and r, the bytes of a collective (each
  distinct number over its fragments and runs)}: the tau `delay=auto` chose (period_auto) or the
  one the streamed run recorded, else the config's."""
  _, timed = corrections.timed_runs(points, variants, with_epochs=True)
  out = {}
  for v, runs in timed:
    taus, tc, rf, sent = set(), [], [], set()
    for r in runs.values():
      squeezed = r.get('snapshot_allreduce') or {}
      tau = (r.get('period_auto') or {}).get('delay') or squeezed.get('delay')
      tau = tau or ((r.get('config') or {}).get('algorithm') or {}).get('delay')
      taus.add(tau if isinstance(tau, int) else None)  # (Not 'auto': the tau it took.)
      tc.append((r.get('timing') or {}).get('Tc_fragment_s'))
      rf.append((r.get('timing') or {}).get('r_fragment'))
      per = squeezed.get('bytes_per_collective')  # {fragment: bytes}
      sent.update(per.values() if isinstance(per, dict) else [per])
    out[v] = {
      'tau_used': sorted(t for t in taus if t is not None),
      'tc_fragment_s': _median(tc),
      'r_fragment': _median(rf),
      'bytes_per_collective': sorted(b for b in sent if b is not None),
    }
  return out


def _median(values):
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def timing_part(link: str, task: str, points, acc: dict) -> dict:
  """One link and column: the TIMED rows (`overlap_analysis.timing_rows`: time to the column's
  target, the epoch speedup, r, hidden; the accuracy the frontier draws from the 24-epoch runs)
  with the tau each used and a fragment's Tc, the Pareto front and the link's r."""
  target = shared.target_of(acc['ssgd'].get(task))
  rows = shared.timing_rows(points, target, acc['rows'].get(task, {}), config.TIMED,
                            config.REFERENCE)  # fmt: skip
  details = _run_details(points, config.TIMED)
  for r in rows:
    r.update(details.get(r['variant'], {}))
  base = next((r for r in rows if r['variant'] == config.REFERENCE), {})
  r_link = base.get('r')
  return {
    'target': target,
    'rows': rows,
    'pareto': shared.pareto(rows),
    'check': {'r': r_link, 'r_class': targets.r_class(link, r_link)},
  }


def run_records(points, stage_of) -> list[dict]:
  """Every finished run's provenance, from the point.json the runner wrote when it started it:
  its stage and link (`stage_of(point)`: (stage, link)), config argument, commit, dirty flag,
  command and machine."""
  out = []
  for p in points:
    if not p.results:
      continue
    info = files.read_json(os.path.join(p.directory, 'point.json')) or {}
    stage, link = stage_of(p)
    out.append({
      'stage': stage,
      'link': link,
      'arg': info.get('config_arg') or ','.join(f'{k}={v}' for k, v in p.arg.items()),
      'state': p.state,
      'commit': info.get('commit'),
      'dirty': info.get('dirty'),
      'command': info.get('command_line'),
      'machine': info.get('host'),
    })  # fmt: skip
  return out


STAGE_TITLES = {
  'accuracy': 'the 24-epoch runs',
  'long': 'the 120-epoch runs',
  'timing': 'the timing runs on the shaped links',
  'mixed': 'the mixed cluster',
  'mixed_timing': "the mixed cluster's timing",
}


def assemble(stages: dict, committed: dict | None = None, mixed_link: str | None = None) -> dict:
  """The artefact's data from the points of each stage that ran (`corrections.as_rows` applied):
  `stages` {'accuracy': points, 'long': points, 'timing': {link: {task: points}}, 'mixed':
  points, 'mixed_timing': points}, a stage absent or None where it was not reached; `committed`:
  long_schedule.json (None: no comparison); `mixed_link`: the mixed cluster's timing link."""
  acc_points, long_points = stages.get('accuracy') or [], stages.get('long') or []
  timed = stages.get('timing') or {}
  mixed_points, mixed_timed = stages.get('mixed') or [], stages.get('mixed_timing') or []
  acc = accuracy_part(acc_points, config.TASKS, config.ACCURACY)
  long = accuracy_part(long_points, config.LONG_TASKS, config.LONG)
  long['committed'] = (
    against_committed(long_points, committed, config.LONG_TASKS) if committed else None
  )
  timing = {link: {task: timing_part(link, task, pts, acc) for task, pts in by_task.items()}
            for link, by_task in timed.items()}  # fmt: skip
  mixed = shared.assemble_mixed(mixed_points, mixed_timed, mixed_link, config.TASKS,
                                tuple(config.MIXED), config.MIXED_SEEDS)  # fmt: skip
  where = {}  # id(point) -> (stage, link)
  for stage in ('accuracy', 'long', 'mixed'):
    where.update({id(p): (stage, None) for p in stages.get(stage) or []})
  where.update({id(p): ('mixed_timing', mixed_link) for p in mixed_timed})
  for link, by_task in timed.items():
    where.update({id(p): ('timing', link) for pts in by_task.values() for p in pts})
  timed_points = [p for by_task in timed.values() for pts in by_task.values() for p in pts]
  everything = acc_points + long_points + timed_points + mixed_points + mixed_timed
  # Each run once (at the smoke scale the long stage is the accuracy stage's runs).
  unique = {}
  for p in everything:
    unique.setdefault(p.directory, p)
  unique = list(unique.values())

  def label(p):
    stage, link = where[id(p)]
    return f'{stage} {p.arg["variant"]} {p.arg["task"]}' + (f' on {link}' if link else '')

  missing, line = common.not_run(everything, label)
  absent = [STAGE_TITLES[s] for s in STAGE_TITLES if stages.get(s) is None]
  if absent:
    line += f' Not reached by this artefact (none of their runs listed): {", ".join(absent)}.'
  return {
    'accuracy': acc,
    'long': long,
    'timing': timing,
    'mixed': mixed,
    'targets': {
      'a': targets.target_a(acc),
      'b': targets.target_b(long),
      'c': targets.target_c(timing),
      'd': targets.target_d(timing),
    },
    'stages': {s: stages.get(s) is not None for s in STAGE_TITLES},
    'not_run': missing,
    'not_run_line': line,
    'runs': run_records(unique, lambda p: where[id(p)]),
    **common.provenance(unique, 'one_host'),
  }
