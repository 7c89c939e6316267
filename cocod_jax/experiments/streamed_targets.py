"""Targets (a)-(d) of the streamed experiment (docs/paper-cpu/PREREGISTRATION.md, amendment 6),
each from the artefact's parts (`streamed_analysis`): its numbers, its status ('met', 'missed',
'undecided': a cell it needs has no runs), by how much a missed one is missed and the measurements
that say why, and the verdict line ('met', 'MISSED by ...', 'not decided (...)')."""

from cocod_jax.experiments import accuracy
from cocod_jax.experiments import overlap_analysis as shared
from configs import streamed as config

TARGET_VS_LOCAL = shared.TARGET_VS_LOCAL  # (a): streamed - Local-SGD >= -0.25 point.
HIDDEN = 0.9  # (c): at least 90% of the communication hidden at r ~ 1 and r ~ 3.
SPEEDUP = {1: 1.6, 3: 2.5}  # (d): time to target over S-SGD's, with both seeds.
# Amendment 6's links and the r each was registered for (amendment 5's S-SGD figures); a link not
# named here is placed by S-SGD's measured r (`r_class`).
LINK_R = {'50mbit/8kb/8000': 1, '18mbit/8kb/8000': 3, '8mbit/8kb/8000': 6}


def r_class(link: str, r: float | None) -> int | None:
  """1, 3 or 6: the r a link stands for (LINK_R, else S-SGD's measured r: below 2, below 4.5,
  above); None for an unnamed link without a measured r."""
  if link in LINK_R:
    return LINK_R[link]
  if r is None:
    return None
  return 1 if r < 2 else (3 if r < 4.5 else 6)


def _verdict(status: str, by: float | None = None, unit: str = ' point', why: str = '') -> str:
  if status == 'met':
    return 'met'
  if status == 'missed':
    return f'MISSED by {by:.2f}{unit}' if by is not None else f'MISSED ({why})'
  return f'not decided ({why})'


def target_a(acc: dict) -> dict:
  """(a) At 24 epochs streamed's difference to Local-SGD, paired by seed, >= -0.25 in every
  column: missed by how far the worst column lies below."""
  gaps = {
    t: (acc['vs_local'].get(t, {}).get(config.STREAMED) or {}).get('gap') for t in config.TASKS
  }
  present = {t: g for t, g in gaps.items() if g is not None}
  failing = {t: g for t, g in present.items() if g < TARGET_VS_LOCAL}
  missing = [t for t in config.TASKS if t not in present]
  by = TARGET_VS_LOCAL - min(failing.values()) if failing else None
  status = 'missed' if failing else ('undecided' if missing else 'met')
  why = f'no paired runs in {len(missing)} of {len(config.TASKS)} columns'
  return {'numbers': gaps, 'failing': sorted(failing), 'status': status, 'by': by,
          'verdict': _verdict(status, by, why=why)}  # fmt: skip


def _worse(row) -> bool | None:
  """Whether a verdict row is worse than S-SGD beyond the margin (its interval entirely below
  -0.5, or a diverged run); None without a verdict."""
  if not row:
    return None
  if row.get('verdict') == 'diverged':
    return True
  return None if row.get('hi') is None else row['hi'] < -accuracy.MARGIN


def target_b(long: dict) -> dict:
  """(b) At 120 epochs streamed is not worse than S-SGD beyond the margin in any column where
  Local-SGD is not: missed by how far the failing interval's upper end lies below -0.5."""
  columns, failing, undecided = {}, {}, []
  for t in config.LONG_TASKS:
    rows = long['rows'].get(t, {})
    mine, local = _worse(rows.get(config.STREAMED)), _worse(rows.get('local_sgd'))
    hi = (rows.get(config.STREAMED) or {}).get('hi')
    columns[t] = {'streamed_hi': hi, 'streamed_worse': mine, 'local_worse': local}
    if mine and local is False:
      failing[t] = -accuracy.MARGIN - hi if hi is not None else None
    elif mine is None or (mine and local is None):
      undecided.append(t)
  by = max((b for b in failing.values() if b is not None), default=None)
  status = 'missed' if failing else ('undecided' if undecided else 'met')
  why = 'diverged' if failing and by is None else f'no verdict in {len(undecided)} column(s)'
  return {'columns': columns, 'failing': sorted(failing), 'status': status, 'by': by,
          'verdict': _verdict(status, by, why=why)}  # fmt: skip


def _streamed_rows(timing: dict, r: int) -> list[tuple[str, dict]]:
  """[(link, streamed's timing row)] of the links that stand for `r`."""
  out = []
  for link, by_task in timing.items():
    for part in by_task.values():
      if part['check'].get('r_class') == r:
        row = next((x for x in part['rows'] if x['variant'] == config.STREAMED), None)
        if row:
          out.append((link, row))
  return out


def target_c(timing: dict) -> dict:
  """(c) At least 90% of the communication hidden (the median over streamed's runs) at r ~ 1
  and r ~ 3: missed by the shortfall in percentage points."""
  per, status, shortfall, missing = {}, 'met', [], []
  for r in (1, 3):
    rows = _streamed_rows(timing, r)
    if not rows:
      missing.append(f'r ~ {r}')
    for link, row in rows:
      hidden = row.get('hidden')
      per[link] = {'r': r, 'hidden': hidden, 'tau_used': row.get('tau_used'),
                   'r_fragment': row.get('r_fragment'), 'tc_fragment_s': row.get('tc_fragment_s'),
                   'tp_s': row.get('tp_s')}  # fmt: skip
      if hidden is None:
        missing.append(link)
      elif hidden < HIDDEN:
        shortfall.append(100 * (HIDDEN - hidden))
  by = max(shortfall) if shortfall else None
  status = 'missed' if shortfall else ('undecided' if missing else 'met')
  why = 'no measurement at ' + ', '.join(missing)
  return {'links': per, 'status': status, 'by': by,
          'verdict': _verdict(status, by, ' percentage points', why)}  # fmt: skip


def _base(part: dict) -> dict:
  return next((r for r in part['rows'] if r['variant'] == config.REFERENCE), {})


def _epochs_reached(row: dict) -> dict:
  return {s: b.get('epoch_reached') for s, b in (row.get('by_seed') or {}).items()}


def _seed_speedups(part: dict, row: dict) -> dict:
  """{seed: streamed's time-to-target speedup over S-SGD's run of the same seed, or None}."""
  base = _base(part)
  out = {}
  for s, mine in row.get('by_seed', {}).items():
    theirs = (base.get('by_seed') or {}).get(s, {}).get('time_s')
    out[s] = theirs / mine['time_s'] if theirs and mine.get('time_s') else None
  return out


def target_d(timing: dict) -> dict:
  """(d) Time to target at least 1.6x S-SGD's at r ~ 1 and 2.5x at r ~ 3, with both seeds:
  missed by the shortfall of the slower seed, or by a seed that never reached the target."""
  per, shortfall, never, missing = {}, [], [], []
  for r, need in SPEEDUP.items():
    found = [(link, part, row) for link, by_task in timing.items() for part in by_task.values()
             if part['check'].get('r_class') == r
             for row in part['rows'] if row['variant'] == config.STREAMED]  # fmt: skip
    if not found:
      missing.append(f'r ~ {r}')
    for link, part, row in found:
      if part.get('target') is None:  # No 24-epoch S-SGD run of the column: nothing to reach.
        missing.append(f'{link} (no target: no 24-epoch S-SGD run of the column)')
        continue
      seeds = _seed_speedups(part, row)
      per[link] = {'r': r, 'need': need, 'speedups': seeds,
                   'reached': [row['reached'], row['runs']],
                   'epoch_speedup': row.get('epoch_speedup'),
                   'epochs_reached': _epochs_reached(row),
                   'ssgd_epochs_reached': _epochs_reached(_base(part))}  # fmt: skip
      if row['reached'] < row['runs']:
        never.append(f'{link}: target reached by {row["reached"]} of {row["runs"]} seeds')
      elif any(x is None for x in seeds.values()):
        missing.append(f'{link} (S-SGD did not reach the target)')
      elif min(seeds.values()) < need:
        shortfall.append(need - min(seeds.values()))
  by = max(shortfall) if shortfall else None
  status = 'missed' if shortfall or never else ('undecided' if missing else 'met')
  why = '; '.join(never) if never else 'no run at ' + ', '.join(missing)
  verdict = _verdict(status, by, 'x', why)
  if by is not None and never:
    verdict += f' ({why})'
  return {'links': per, 'status': status, 'by': by, 'never': never, 'verdict': verdict}
