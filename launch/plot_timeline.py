"""Draws one measured round per algorithm from the runs' timelines (the paper's Figure 1, measured).

    .venv/bin/python launch/plot_timeline.py --out=runs/fig1.png runs/ssgd runs/cocod ...

Each argument is a workdir of an MPI run (it holds timeline_rank<r>.json). For Local-SGD and
CoCoD-SGD the window is one full round of the last epoch; for S-SGD and Pipe-SGD it is k = 5
consecutive steps there. Every rank gets two lanes, three when it recorded local means: the main
thread (local steps, the snapshot and correction, waits on communication), the local mean over
the rank's workers on its devices, and the communicator's thread (the allreduce between ranks).
Ranks of one host share a clock and are drawn aligned.
"""

import json
import os
import sys

from absl import app
from absl import flags

COLORS = {
  'step': '#4c72b0',
  'merge': '#dd8452',
  'wait': '#c44e52',
  'local': '#8172b3',
  'allreduce': '#55a868',
}
LABELS = {
  'step': 'local step',
  'merge': 'snapshot / correction',
  'wait': 'waiting on communication',
  'local': 'local mean (rank devices)',
  'allreduce': 'allreduce between ranks',
}
LANES = ((0, 'main'), (2, 'local'), (1, 'comm'))  # (trace tid, label), top to bottom.


def load(workdir):
  """{rank: (origin_s, spans)}, spans as dicts with start/end in seconds on the host clock."""
  out = {}
  for name in sorted(os.listdir(workdir)):
    if not (name.startswith('timeline_rank') and name.endswith('.json')):
      continue
    with open(os.path.join(workdir, name)) as f:
      trace = json.load(f)
    meta = trace.get('otherData', {})
    origin = meta.get('origin_s', 0.0)
    spans = []
    for e in trace['traceEvents']:
      if e.get('ph') == 'X':
        start = origin + e['ts'] / 1e6
        spans.append(dict(e, start=start, end=start + e['dur'] / 1e6))
    out[meta.get('rank', len(out))] = spans
  if not out:
    raise FileNotFoundError(f'{workdir} has no timeline_rank*.json (was it an MPI run?)')
  return out


def window(spans, k=5):
  """(start, end) of one full round (Local-SGD, CoCoD) or k steps (S-SGD, Pipe-SGD)."""
  last = max(s['args'].get('epoch', 0) for s in spans)
  rounds = [
    s
    for s in spans
    if s['cat'] == 'round' and s['args'].get('full') and s['args'].get('epoch') == last
  ]
  if rounds:
    r = rounds[len(rounds) // 2]
    return r['start'], r['end']
  starts = sorted(
    s['start'] for s in spans if s['name'] == 'grads' and s['args'].get('epoch') == last
  )
  if len(starts) <= k:
    raise ValueError('the last epoch has too few steps for a window of k steps')
  return starts[0], starts[k]


def plot(workdirs, titles, out, title=''):
  """Writes a PNG with one panel per workdir, sharing the time axis (ms from the window start)."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, axes = plt.subplots(len(workdirs), 1, figsize=(10, 1.6 + 1.1 * len(workdirs)), sharex=True)
  axes = [axes] if len(workdirs) == 1 else list(axes)
  longest = 0.0
  for ax, wd, name in zip(axes, workdirs, titles):
    ranks = load(wd)
    t0, t1 = window(ranks[min(ranks)])
    longest = max(longest, t1 - t0)
    ticks, labels = [], []
    for rank in sorted(ranks):
      present = {s['tid'] for s in ranks[rank]}
      for thread, lane in [(t, n) for t, n in LANES if t in present or t != 2]:
        y = -len(ticks)
        ticks.append(y)
        labels.append(f'rank {rank} {lane}')
        for s in ranks[rank]:
          if s['tid'] != thread or s['cat'] not in COLORS or s['end'] < t0 or s['start'] > t1:
            continue
          a, b = max(s['start'], t0), min(s['end'], t1)
          ax.broken_barh([((a - t0) * 1e3, (b - a) * 1e3)], (y - 0.4, 0.8), color=COLORS[s['cat']])
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.set_title(f'{name}: {(t1 - t0) * 1e3:.0f} ms for k = 5 steps', fontsize=9, loc='left')
  axes[-1].set_xlabel('time from the start of the window (ms)')
  axes[-1].set_xlim(0, longest * 1e3 * 1.02)
  handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
  fig.legend(handles, LABELS.values(), loc='upper right', fontsize=7, ncol=5)
  if title:
    fig.suptitle(f'Measured timeline, {title}', x=0.01, ha='left', fontsize=10)
  fig.tight_layout(rect=(0, 0, 1, 0.95))
  tmp = out + '.tmp.png'
  fig.savefig(tmp, dpi=130)
  plt.close(fig)
  os.replace(tmp, out)


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    sys.exit('usage: plot_timeline.py --out=FILE.png WORKDIR [WORKDIR ...]')
  plot(workdirs, [os.path.basename(os.path.normpath(w)) for w in workdirs], flags.FLAGS.out)
  print(flags.FLAGS.out)


if __name__ == '__main__':
  flags.DEFINE_string('out', 'timeline.png', 'The PNG to write.')  # Here: bench.py imports plot.
  app.run(main)
