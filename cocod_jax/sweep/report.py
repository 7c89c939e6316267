"""The sweep's summary: a fixed-width table of its points, written as sweep.md and sweep.json.

The table is plain text rendered here (the columns are few and fixed; a table library would add a
dependency for what ljust and rjust do, and the golden text tests pin every character).
"""

import os

from cocod_jax.record import files
from cocod_jax.sweep import points as points_lib

HEADER = ('point', 'state', 'stale', 'wall (s)', 'test acc', 'train time (s)')
LEFT = (True, True, True, False, False, False)
ORDER = ('DONE', 'DIVERGED', 'RUNNING', 'FAILED', 'INCOMPLETE', 'PENDING', 'MISMATCH')
ADVICE = (
  ('FAILED', 'see log.txt and status.json in the point directory; --retry_failed runs it again'),
  ('RUNNING', 'another runner or a Slurm job is on it; run this command again later'),
  ('MISMATCH', 'the directory holds another config; move it aside and run again'),
)


def number(value, fmt: str) -> str:
  """`fmt % value` for a number, '-' for anything else (None, a bool, a text)."""
  return '-' if not isinstance(value, (int, float)) or isinstance(value, bool) else fmt % value


def _row(r: dict) -> tuple:
  m = r.get('metrics') or {}
  stale = '-' if r.get('stale') is None else ('yes' if r['stale'] else 'no')
  return (
    os.path.basename(r['dir']),
    r['state'],
    stale,
    number(r.get('wall_s'), '%.1f'),
    number(m.get('test_accuracy'), '%.4f'),
    number(m.get('train_time_s'), '%.1f'),
  )


def _table(rows: list[tuple]) -> list[str]:
  widths = [max(len(str(x)) for x in column) for column in zip(HEADER, *rows)]

  def line(cells):
    out = [str(c).ljust(w) if lft else str(c).rjust(w) for c, w, lft in zip(cells, widths, LEFT)]
    return '| ' + ' | '.join(out) + ' |'

  rule = [':' + '-' * (w + 1) if lft else '-' * (w + 1) + ':' for w, lft in zip(widths, LEFT)]
  return [line(HEADER), '|' + '|'.join(rule) + '|'] + [line(r) for r in rows]


def _warnings(records: list[dict], head: str) -> list[str]:
  lines = []
  stale = [r for r in records if r.get('stale')]
  if stale:
    lines.append(
      f'warning: {len(stale)} point{"s were" if len(stale) > 1 else " was"} run at another '
      f'commit than HEAD ({head[:12]}): kept and not rerun; --rerun_stale runs '
      f'{"them" if len(stale) > 1 else "it"} again'
    )
  for name, advice in ADVICE:
    for r in records:
      if r['state'] == name:
        why = f' ({r["detail"]})' if r.get('detail') else ''
        lines.append(f'{name}: {os.path.basename(r["dir"])}{why}: {advice}')
  return lines


def render(records: list[dict], head: str = 'unknown') -> str:
  """The fixed-width summary: one row per point (a missing value is '-'), then the counts and
  the warnings (STALE, FAILED, RUNNING, MISMATCH)."""
  lines = _table([_row(r) for r in records])
  counts = {}
  for r in records:
    counts[r['state']] = counts.get(r['state'], 0) + 1
  shown = ', '.join(f'{counts[s]} {s}' for s in ORDER if s in counts)
  lines += ['', f'{len(records)} point{"s" * (len(records) != 1)}: {shown}']
  return '\n'.join(lines + _warnings(records, head)) + '\n'


def summary_dir(workdir: str, config: str) -> str:
  """Where a sweep's summary (and its Slurm files) go: `WORKDIR/sweeps/<sweep name>`."""
  return os.path.join(os.path.abspath(workdir), 'sweeps', points_lib.sweep_name(config))


def write_summary(config: str, workdir: str, records: list[dict], head: str) -> str:
  """Writes sweep.md and sweep.json of `records` atomically; returns the rendered table."""
  table = render(records, head)
  out = summary_dir(workdir, config)
  os.makedirs(out, exist_ok=True)
  files.write_atomic(
    os.path.join(out, 'sweep.md'),
    f'# Sweep {points_lib.sweep_name(config)}\n\n`--config={config}`, commit {head}\n\n{table}',
  )
  kept = [{k: v for k, v in r.items() if k != 'results'} for r in records]
  files.write_json_atomic(
    os.path.join(out, 'sweep.json'),
    dict(config=config, workdir=os.path.abspath(workdir), commit=head, points=kept),
  )
  return table
