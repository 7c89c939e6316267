"""Timeline figures from hand-made spans, the Chrome trace format, and the round plot."""

import json

import numpy as np
import pytest

from cocod_jax import timeline as timeline_lib
from launch import plot_timeline


def _cocod_like(origin=100.0):
  """Two epochs of one rank: k = 2 steps of 0.1 s a round, a 0.3 s allreduce, 0.1 s exposed."""
  tl = timeline_lib.Timeline(enabled=True, rank=0)
  tl.origin = origin
  for epoch in (1, 2):
    t = origin + 10 * epoch
    tl.add('snapshot', 'merge', t, t + 0.01, epoch=epoch)
    tl.add('step', 'step', t + 0.01, t + 0.11, epoch=epoch)
    tl.add('step', 'step', t + 0.11, t + 0.21, epoch=epoch)
    tl.add('wait', 'wait', t + 0.21, t + 0.31, epoch=epoch)
    tl.add('allreduce', 'allreduce', t + 0.01, t + 0.31, thread=timeline_lib.COMM, epoch=epoch)
    tl.add('correct', 'merge', t + 0.31, t + 0.32, epoch=epoch)
    tl.add('round', 'round', t, t + 0.32, epoch=epoch, full=True)
    tl.sampled_steps[epoch] = 2
  return tl


def test_summary_by_hand():
  tl = _cocod_like()
  s = tl.summary(from_epoch=2, steps=2, train_time_s=0.32)
  # Epoch 2 only: Tp = 0.2 s / 2 steps, Tc = 0.3 s, 0.1 s of it exposed: 2/3 hidden.
  np.testing.assert_allclose(
    [s['Tp_s'], s['Tc_s'], s['r'], s['exposed_comm_s'], s['comm_s'], s['hidden_fraction']],
    [0.1, 0.3, 3.0, 0.1, 0.3, 2 / 3],
    rtol=1e-6,
  )
  np.testing.assert_allclose([s['step_time_s'], s['round_time_s']], [0.16, 0.32], rtol=1e-6)
  assert s['collectives'] == 1 and s['from_epoch'] == 2


def test_blocking_collectives_hide_nothing():
  tl = timeline_lib.Timeline(enabled=True)
  tl.add('grads', 'step', 0.0, 0.1, epoch=1)
  tl.add('wait', 'wait', 0.1, 0.3, epoch=1)
  tl.add('allreduce', 'allreduce', 0.1, 0.3, thread=timeline_lib.COMM, epoch=1)
  tl.sampled_steps[1] = 1
  assert tl.summary(1, 1, 0.3)['hidden_fraction'] == 0.0


def test_epoch_end_drain_is_counted_apart():
  # Pipe-SGD-like: two 0.1 s steps, each hiding 0.05 s of a 0.15 s allreduce, then the last one
  # waited for in full at the end of the epoch.
  tl = timeline_lib.Timeline(enabled=True)
  tl.add('grads', 'step', 0.0, 0.1, epoch=1)
  tl.add('allreduce', 'allreduce', 0.1, 0.25, thread=timeline_lib.COMM, epoch=1)
  tl.add('grads', 'step', 0.1, 0.2, epoch=1)
  tl.add('wait', 'wait', 0.2, 0.25, epoch=1, drain=False)
  tl.add('allreduce', 'allreduce', 0.25, 0.4, thread=timeline_lib.COMM, epoch=1)
  tl.add('wait', 'wait', 0.25, 0.4, epoch=1, drain=True)
  tl.sampled_steps[1] = 2
  s = tl.summary(1, 2, 0.4)
  np.testing.assert_allclose([s['exposed_comm_s'], s['drain_s']], [0.2, 0.15], rtol=1e-6)
  np.testing.assert_allclose(s['hidden_fraction'], 1 - 0.2 / 0.3, rtol=1e-6)


def test_disabled_timeline_records_nothing():
  tl = timeline_lib.Timeline(enabled=False)
  with tl.span('step', 'step', epoch=1):
    pass
  tl.add('allreduce', 'allreduce', 0.0, 1.0, thread=timeline_lib.COMM)
  assert tl.spans == [] and tl.summary(1, 0, 0.0)['hidden_fraction'] is None


def test_chrome_trace_and_plot(tmp_path):
  tl = _cocod_like()
  tl.write_chrome_trace(str(tmp_path / 'timeline_rank0.json'))
  trace = json.loads((tmp_path / 'timeline_rank0.json').read_text())
  spans = [e for e in trace['traceEvents'] if e['ph'] == 'X']
  assert len(spans) == 14 and trace['otherData']['origin_s'] == 100.0
  comm = [e for e in spans if e['name'] == 'allreduce']
  assert {e['tid'] for e in comm} == {1}
  np.testing.assert_allclose([e['dur'] for e in comm], [3e5, 3e5], rtol=1e-6)  # microseconds
  assert plot_timeline.window(plot_timeline.load(str(tmp_path))[0]) == (120.0, 120.32)
  out = str(tmp_path / 'fig.png')
  plot_timeline.plot([str(tmp_path)], ['CoCoD-SGD'], out)
  with open(out, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_local_mean_counts_as_communication():
  # A rank of several workers: a 0.02 s local mean before a background 0.3 s allreduce (exposed:
  # it runs in line with the steps), and a blocking average whose 0.01 s local mean lies inside
  # its 0.11 s wait (exposed there already, not twice).
  tl = timeline_lib.Timeline(enabled=True)
  tl.add('local_mean', 'local', 0.0, 0.02, thread=timeline_lib.LOCAL, epoch=1, in_wait=False)
  tl.add('step', 'step', 0.02, 0.22, epoch=1)
  tl.add('allreduce', 'allreduce', 0.02, 0.32, thread=timeline_lib.COMM, epoch=1)
  tl.add('wait', 'wait', 0.22, 0.32, epoch=1)
  tl.add('wait', 'wait', 0.32, 0.43, epoch=1)
  tl.add('local_mean', 'local', 0.32, 0.33, thread=timeline_lib.LOCAL, epoch=1, in_wait=True)
  tl.add('allreduce', 'allreduce', 0.33, 0.43, thread=timeline_lib.COMM, epoch=1)
  tl.sampled_steps[1] = 1
  s = tl.summary(1, 1, 0.43)
  # comm = 0.4 allreduce + 0.03 local; exposed = 0.21 waits + 0.02 local outside them.
  np.testing.assert_allclose(
    [s['Tc_s'], s['Tl_s'], s['local_s'], s['comm_s'], s['exposed_comm_s']],
    [0.2, 0.015, 0.03, 0.43, 0.23],
    rtol=1e-6,
  )
  np.testing.assert_allclose(s['hidden_fraction'], 1 - 0.23 / 0.43, rtol=1e-6)
  assert s['local_means'] == 2 and s['collectives'] == 2
  combined = timeline_lib.combine([dict(s), dict(s)])
  assert combined['Tl_s'] == s['Tl_s'] and 'local mean 15.0 ms' in timeline_lib.describe(combined)


def test_combine_takes_tc_without_the_wait_for_the_slow_rank():
  # Two collectives. Rank 0 (fast) arrives first and waits inside both: its spans are 0.5 and
  # 0.6 s; rank 1 arrives last, its spans are the collectives themselves, 0.2 and 0.3 s. Tc is
  # their mean, 0.25 s, not the mean of everything (0.4 s), which counts rank 0's waits.
  def rank(spans, tp):
    return {'Tp_s': tp, 'Tc_s': float(np.mean(spans)), 'step_time_s': 1.0, 'round_time_s': None,
            'exposed_comm_s': 0.1, 'drain_s': 0.0, 'comm_s': float(sum(spans)),
            'from_epoch': 2, 'steps': 4, 'sampled_steps': 4, 'allreduce_s': spans}  # fmt: skip

  tm = timeline_lib.combine([rank([0.5, 0.6], 0.1), rank([0.2, 0.3], 0.15)])
  np.testing.assert_allclose([tm['Tc_s'], tm['Tc_with_wait_s']], [0.25, 0.4], rtol=1e-9)
  np.testing.assert_allclose(tm['r'], 0.25 / 0.125, rtol=1e-9)
  assert all('allreduce_s' not in r for r in tm['ranks'])  # Not written to results.json.
  # Collectives are matched by their order: the minimum is taken per collective, not overall.
  tm = timeline_lib.combine([rank([0.2, 0.6], 0.1), rank([0.5, 0.3], 0.1)])
  np.testing.assert_allclose(tm['Tc_s'], 0.25, rtol=1e-9)


def test_a_drain_counts_in_the_hidden_fraction_only_where_its_round_is_sampled():
  # Every second round timed: round 0 sampled (a 0.1 s allreduce hidden behind its step), round 1
  # not, and the epoch ends inside it with a 0.3 s wait. The drain is always timed (drain_s), but
  # it counts in the hidden fraction only as its round would: not here, so 100% hidden (before:
  # 0.3 s exposed of 0.4 s, 25%, a weight of every drain sample_every times a round's).
  tl = timeline_lib.Timeline(enabled=True, sample_every=2)
  tl.epoch = 1
  tl.begin_round(0, 1)
  with tl.span('step', 'step'):
    pass
  tl.add('allreduce', 'allreduce', 0.0, 0.1, thread=timeline_lib.COMM)
  tl.end_step(0)
  tl.begin_round(1, 2)
  assert not tl.sampling
  with tl.drain():
    tl.add('wait', 'wait', 1.0, 1.3, drain=True)
    tl.add('allreduce', 'allreduce', 1.0, 1.3, thread=timeline_lib.COMM)
  s = tl.summary(1, 3, 2.0)
  assert s['hidden_fraction'] == 1.0 and s['drain_s'] == pytest.approx(0.3)
  assert s['collectives'] == 2


def test_the_line_says_what_the_epoch_ends_waited_and_why_nothing_was_measured():
  tm = {'steps': 100, 'from_epoch': 2, 'ranks': [{}, {}], 'Tp_s': 0.008, 'Tl_s': None,
        'Tc_s': 0.014, 'r': 1.75, 'step_time_s': 0.011, 'hidden_fraction': 0.96,
        'drain_s': 0.25}  # fmt: skip
  line = timeline_lib.describe(tm)
  assert line.endswith('communication hidden 96% (and 0.25 s waited at epoch ends, 2.5 ms a step)')
  assert timeline_lib.describe(dict(tm, drain_s=0.0)).endswith('communication hidden 96%')
  # No sampled round in the measured epochs: no NaN, a reason.
  none = timeline_lib.describe(dict(tm, Tp_s=None, r=None, rounds=7, sample_every=10))
  assert (
    'Tp and r not measured: no round from epoch 2 on was timed (every 10th round of the run '
    'is timed, and it had 7'
    in none
    and 'nan' not in none
  )
