"""The run's console lines (writers.start_line, writers.where_written) without running a run."""

import os

import ml_collections

from cocod_jax import writers


class _Cluster:
  def __init__(self, backend, processes, workers, devices):
    self.backend = backend
    self._layout = {
      'processes': processes,
      'workers_per_process': workers,
      'devices_per_process': devices,
      'platform': 'cpu',
    }

  def layout(self):
    return self._layout


def _options(**fields):
  a = ml_collections.ConfigDict(dict(name='cocod_sgd', period=5, delay=None, correction='cocod'))
  a.update(fields)
  return a


def test_start_line_names_the_algorithm_layout_and_workdir(tmp_path):
  line = writers.start_line(str(tmp_path), _options(), _Cluster('one_host', 1, 16, 8), 16)
  assert line == (
    f'run: cocod_sgd period=5 delay=None; 16 workers on one process, 8 cpu device(s); '
    f'workdir {tmp_path}'
  )


def test_start_line_under_mpi_shows_ranks_and_fragments(tmp_path):
  # algorithm.fragments is shown only above 1 (a config without the field reads as 1).
  options = _options(delay=1)
  options.fragments = 4
  line = writers.start_line('rel', options, _Cluster('mpi', 2, 8, 4), 16)
  assert 'cocod_sgd period=5 delay=1 fragments=4;' in line
  assert '16 workers on 2 ranks of 8 each, 4 cpu device(s) a rank' in line
  assert line.endswith(f'workdir {os.path.abspath("rel")}')
  options.fragments = 1
  assert 'fragments' not in writers.start_line('rel', options, _Cluster('mpi', 2, 8, 4), 16)


def test_start_line_leaves_out_what_the_algorithm_does_not_read(tmp_path):
  ssgd = writers.start_line('w', _options(name='ssgd'), _Cluster('one_host', 1, 2, 1), 2)
  assert ssgd.startswith('run: ssgd; 2 workers')
  local = writers.start_line('w', _options(name='local_sgd'), _Cluster('one_host', 1, 2, 1), 2)
  assert local.startswith('run: local_sgd period=5; ')
  anchor = writers.start_line('w', _options(correction='anchor'), _Cluster('one_host', 1, 2, 1), 2)
  assert 'cocod_sgd period=5 delay=None correction=anchor;' in anchor


def test_where_written_names_every_output(tmp_path):
  line = writers.where_written(str(tmp_path))
  for name in ('results.json', 'final_params.npz'):
    assert os.path.join(str(tmp_path), name) in line
  assert f'tensorboard --logdir={tmp_path}' in line
