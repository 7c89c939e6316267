"""The overlap and corrections figures: drawn from the committed json (docs/paper-cpu/overlap.json,
docs/archive/corrections.json; overlap's from its json alone, with `--replot`; corrections' timing
panels need the runs' epochs, which its json does not hold, so they get made-up runs), each on a
grid, the links by rate, the accuracy axis set by the bulk of the points and every outlier at its
edge with its value written."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from cocod_jax.experiments import common
from cocod_jax.experiments import corrections
from cocod_jax.experiments import figures
from cocod_jax.experiments import overlap_plots
from configs import overlap as overlap_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER = os.path.join(ROOT, 'docs', 'paper-cpu')
ARCHIVE = os.path.join(ROOT, 'docs', 'archive')


def _json(name, folder=PAPER):
  with open(os.path.join(folder, f'{name}.json'), encoding='utf-8') as f:
    return json.load(f)


def _grid(fig):
  return {ax.get_subplotspec().get_geometry()[:2] for ax in fig.axes}


def _check_axis(ax, values):
  """Every value beyond the y limits is labelled with itself; every other is within them; the
  outliers found: [(label)]."""
  low, high = ax.get_ylim()
  labels = [t.get_text() for t in ax.texts]
  out = []
  for v in values:
    if low <= v <= high:
      continue
    assert f'{v:+.1f}' in labels, (v, labels)
    out.append(f'{v:+.1f}')
  assert sorted(out) == sorted(labels)  # No label but an outlier's.
  return out


def _close(fig):
  common._pyplot().close(fig)  # pylint: disable=protected-access


def test_link_rate_and_bulk():
  links = ['18mbit/8kb/8000', '5.5mbit/8kb/8000', '1gbit', '12mbit', '500kbit']
  assert figures.by_rate(links) == ['500kbit', '5.5mbit/8kb/8000', '12mbit', '18mbit/8kb/8000',
                                    '1gbit']  # fmt: skip
  assert figures.link_rate('5.5mbit/8kb/8000') == 5.5e6
  low, high = figures.bulk([-2.0, -1.9, -1.5, -18.0, -72.0])
  assert low < -2.0 and -1.5 < high and -18.0 < low  # Spread floored at the margin: +-4 points.


def test_overlap_figure_from_committed_json():
  data = _json('overlap')
  fig = overlap_plots.draw(data)
  assert len(fig.axes) == len(overlap_config.TASKS) == 4 and _grid(fig) == {(2, 2)}
  found = {}
  for ax, task in zip(fig.axes, overlap_config.TASKS):
    values = [r['difference'] for stage in ('pilot', 'full')
              for r in data[stage]['rows'].get(task, {}).values()
              if r.get('difference') is not None]  # fmt: skip
    found[task] = _check_axis(ax, values)
  # The hard CNN column's eager settings at -72 and -68 points: at the edge, not on the axis.
  assert {'-71.8', '-68.0'} <= set(found['c100_r18']) and fig.axes[0].get_ylim()[0] > -10
  assert not found['c10_r18'] and not found['c10_v16']
  _close(fig)


def test_overlap_frontier_from_committed_json():
  data = _json('overlap')
  assert list(data['timing']) == ['50mbit/8kb/8000', '18mbit/8kb/8000']  # The runs' order.
  fig = overlap_plots.draw_frontier(data)
  assert len(fig.axes) == 2 and _grid(fig) == {(1, 2)}
  assert [ax.get_title().split()[0] for ax in fig.axes] == ['18mbit/8kb/8000', '50mbit/8kb/8000']
  for ax in fig.axes:  # Every point within -0.8 and 0: none beyond the axis.
    rows = data['timing'][ax.get_title().split()[0]]['c10_r18']['rows']
    assert not _check_axis(ax, [r['accuracy']['difference'] for r in rows])
  _close(fig)
  # A diverged option on the Pareto front (the fastest): at the bottom edge with its value.
  row = data['timing']['18mbit/8kb/8000']['c10_r18']['rows'][-1]
  row['accuracy'].update(difference=-40.0, lo=-41.0, hi=-39.0)
  fig = overlap_plots.draw_frontier(data)
  assert _check_axis(fig.axes[0], [-40.0]) == ['-40.0'] and fig.axes[0].get_ylim()[0] > -5
  _close(fig)


def _run(variant, link_seed, epoch_s, top):
  epochs = [{'epoch': e, 'train_time_s': e * epoch_s, 'test_accuracy': top * e / 10}
            for e in range(1, 11)]  # fmt: skip
  arg = {'variant': variant, 'algo': variant, 'task': 'c100_r18', 'seed': str(link_seed)}
  return common.Outcome(arg, 'DONE', f'points/{variant}', 'h', {'epochs': epochs})


def test_corrections_figure_on_committed_rows():
  # The accuracy panel from corrections.json's rows; the timing panels on made-up runs, one link
  # a panel, given in the json's order (18, 5.5, 12 Mbit/s).
  data = _json('corrections', ARCHIVE)  # A record of an earlier build (docs/archive/README.md).
  timed = {link: [_run(v, s, 1.0 / (i + 1), 0.8) for v in corrections.TIMED for s in (0, 1)]
           for i, link in enumerate(data['timing'])}  # fmt: skip
  assert list(timed) == ['18mbit/8kb/8000', '5.5mbit/8kb/8000', '12mbit/8kb/8000']
  fig = corrections.draw(data['task'], data['accuracy'], timed, 'title')
  assert len(fig.axes) == 4 and _grid(fig) == {(2, 2)}
  titles = [ax.get_title() for ax in fig.axes[1:]]
  assert titles == ['MPI 2 x 8, 5.5mbit/8kb/8000', 'MPI 2 x 8, 12mbit/8kb/8000',
                    'MPI 2 x 8, 18mbit/8kb/8000']  # fmt: skip
  ax = fig.axes[0]
  shown = [r for r in data['accuracy'] if r.get('difference') is not None]
  assert [t.get_text() for t in ax.get_xticklabels()] == [r['variant'] for r in shown]
  found = _check_axis(ax, [r['difference'] for r in shown])
  assert sorted(found) == ['-18.0', '-66.9', '-72.0']  # outer_sgd_mild, reset, outer_sgd.
  assert ax.get_ylim()[0] > -5  # The bulk: about -2 points, with the margin band.
  _close(fig)


def _entry(name, *args):
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  cmd = [sys.executable, '-m', f'cocod_jax.experiments.{name}', *args]
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_overlap_replot_rewrites_only_the_figures(tmp_path):
  shutil.copy(os.path.join(PAPER, 'overlap.json'), tmp_path / 'overlap.json')
  before = (tmp_path / 'overlap.json').read_bytes()
  done = _entry('overlap', '--replot', f'--workdir={tmp_path}')
  assert done.returncode == 0, done.stderr
  assert sorted(os.listdir(tmp_path)) == ['overlap.json', 'overlap.png', 'overlap_frontier.png']
  assert (tmp_path / 'overlap.json').read_bytes() == before
  assert (tmp_path / 'overlap.png').stat().st_size > 10_000
  missing = _entry('overlap', '--replot', f'--workdir={tmp_path / "none"}')
  assert missing.returncode == 2 and 'overlap.json, which does not exist' in missing.stderr
  # corrections.json has no epochs to draw: that entry point refuses the flag.
  refused = _entry('corrections', '--replot', f'--workdir={tmp_path}')
  assert refused.returncode == 2 and 'replot' in refused.stderr
