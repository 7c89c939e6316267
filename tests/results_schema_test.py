"""The results schema refuses malformed files with one line naming the file and the field."""

import json

import pytest

from cocod_jax.record import schema as rs

EPOCH = dict(epoch=0, train_loss=2.3, test_loss=2.2, test_accuracy=0.31, train_time_s=1.5)


def _results(**changes):
  out = dict(config={'seed': 0}, backend='mpi', status='completed', batch_sizes=[8, 8],
             weights=[0.5, 0.5], steps_per_epoch=3, workers=[], epochs=[dict(EPOCH)],
             final=dict(EPOCH), test_examples=297)  # fmt: skip
  out.update(changes)
  return out


def _write(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def test_a_good_file_loads_unchanged(tmp_path):
  path = _write(tmp_path, 'results.json', json.dumps(_results()))
  assert rs.load_results(path) == _results()
  lines = json.dumps(EPOCH) + '\n\n' + json.dumps(dict(EPOCH, epoch=1)) + '\n'
  assert [r['epoch'] for r in rs.load_metrics(_write(tmp_path, 'metrics.jsonl', lines))] == [0, 1]
  # A diverged run has no "final" but says where it diverged; its losses may be NaN.
  diverged = _results(
    status='diverged', diverged={'step': 4}, epochs=[dict(EPOCH, train_loss=float('nan'))]
  )
  del diverged['final']
  assert rs.check_results(diverged)['status'] == 'diverged'


@pytest.mark.parametrize(
  'results, message',
  [
    (_results(epochs=None), "results.json: epochs is NoneType None, expected list"),
    ({k: v for k, v in _results().items() if k != 'backend'}, "results.json: no 'backend' field"),
    (_results(status='running'), "status 'running' is not one of completed, diverged"),
    (_results(backend='emulated'), "backend 'emulated' is not one of one_host, mpi"),
    ({k: v for k, v in _results().items() if k != 'final'}, 'a completed run has no "final"'),
    (_results(steps_per_epoch=3.0), 'steps_per_epoch is float 3.0, expected int'),
    (_results(test_examples=True), 'test_examples is bool True, expected int'),
    (_results(epochs=[dict(EPOCH, test_accuracy=31.0)]),
     'epochs[0].test_accuracy is 31.0, expected 0..1'),  # A percentage is not an accuracy.
    (_results(epochs=[dict(EPOCH, train_time_s='1.5')]),
     "epochs[0].train_time_s is str '1.5', expected float"),
    (_results(epochs=[{'epoch': 0}]), "epochs[0] has no 'train_loss'"),
    ([1, 2], 'results.json: expected an object, found list'),
  ],
)  # fmt: skip
def test_malformed_results_are_refused_in_one_line(results, message):
  with pytest.raises(rs.SchemaError) as e:
    rs.check_results(results)
  assert message in str(e.value) and '\n' not in str(e.value)


def test_unreadable_files(tmp_path):
  with pytest.raises(rs.SchemaError, match='cannot read it'):
    rs.load_results(str(tmp_path / 'missing.json'))
  with pytest.raises(rs.SchemaError, match='results.json: not JSON'):
    rs.load_results(_write(tmp_path, 'results.json', '{"config": '))
  bad = json.dumps(EPOCH) + '\n{"epoch": 1\n'
  with pytest.raises(rs.SchemaError, match=r'metrics.jsonl:2: not JSON'):
    rs.load_metrics(_write(tmp_path, 'metrics.jsonl', bad))
  with pytest.raises(rs.SchemaError, match=r"metrics.jsonl:1 has no 'test_loss'"):
    rs.load_metrics(_write(tmp_path, 'metrics.jsonl', '{"epoch": 0, "train_loss": 1.0}\n'))
