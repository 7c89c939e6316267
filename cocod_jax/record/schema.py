"""The one schema of a run's outputs, checked wherever they are read back.

A run writes `results.json` (the whole run, rewritten atomically at its end or when it diverges)
and `metrics.jsonl` (one epoch record a line, appended as training goes). Both carry the same
epoch records. Readers (the sweep runner's states, the tables and figures, a user's notebook)
load them through `load_results` and `load_metrics`, which refuse a file that does not follow
the schema with one line naming the file and the field, instead of a KeyError deep in a plot.

results.json:
  config            the resolved config (dict), as the run saw it
  backend           'one_host' or 'mpi'
  status            'completed' or 'diverged'
  batch_sizes       M_i per worker;  weights  w_i per worker
  steps_per_epoch   global steps an epoch
  train_examples    examples in the training set;  test_examples  in the test set (the
                    resolution of an accuracy: one example is 100 / test_examples points)
  workers           per worker: speed, batch, local steps, the time model's idle fraction
  layout            processes (MPI ranks; 1 on the one-host cluster), workers_per_process,
                    devices_per_process, platform (optional: earlier files lack it)
  epochs            epoch records (below)
  final             completed runs: the averaged model's test_loss, test_accuracy, train_time_s
  diverged          diverged runs: where (worker or rank), step, learning rate, what
  timing            MPI runs: measured Tp, Tc (the allreduce between ranks), Tl (the local
                    mean over a rank's workers), local_s, comm_s (both parts), exposed
                    communication, hidden_fraction, per rank and combined; streamed CoCoD-SGD
                    also fragments, Tc_fragment_s, Tc_round_s, r_fragment (optional)
  snapshot_allreduce  CoCoD-SGD with a compressed snapshot allreduce (comm.dtype): dtype,
                    error_feedback, rounds, payload_bytes (one sender's message a round), and
                    on the one-host cluster update_rel_error and model_rel_error (the rounding
                    error of the average against the float32 one, relative to the round's
                    update and to the model; root of the sums over rounds); streamed CoCoD-SGD
                    (algorithm.fragments > 1): fragments, delay (the tau used), elements,
                    fragment_elements, bytes_per_collective (optional)
  period_auto       runs with algorithm.period or delay 'auto': Tp_s, Tc_s, r, the chosen k
                    (and tau: delay; with fragments Tc_fragment_s), its cap, samples, each rank's
                    [Tp_s, Tc_s], source, measure_s (period_auto.py; optional)
  restart_compile_s  runs resumed from a checkpoint: the seconds their later processes spent
                    compiling again, left out of every train_time_s (optional)

An epoch record: epoch (int, from 0), train_loss (the mean of the workers' own step losses),
test_loss, test_accuracy (0..1, the evaluated model's) and train_time_s (seconds of training so
far, evaluation excluded); with config.eval_train_examples > 0 also avg_train_loss and
avg_train_accuracy (the evaluated model on the first that many training examples).

`train_examples` and `test_examples` came in after the first results were written; files
without them load, and the tables then judge accuracy gaps on the spread over seeds alone.
"""

import json
import math
import numbers

from cocod_jax.config import defaults

EPOCH_FIELDS = {
  'epoch': int,
  'train_loss': float,
  'test_loss': float,
  'test_accuracy': float,
  'train_time_s': float,
}
RESULTS_FIELDS = {
  'config': dict,
  'backend': str,
  'status': str,
  'batch_sizes': list,
  'weights': list,
  'steps_per_epoch': int,
  'workers': list,
  'epochs': list,
}
OPTIONAL_FIELDS = {
  'train_examples': int,
  'test_examples': int,
  'final': dict,
  'diverged': dict,
  'timing': dict,
  'layout': dict,
  'snapshot_allreduce': dict,
  'period_auto': dict,
  'restart_compile_s': float,
}
STATUSES = ('completed', 'diverged')
BACKENDS = defaults.BACKENDS  # What results.json's `backend` may say.


class SchemaError(ValueError):
  """A results file that does not follow the schema; the message is one line."""


def _check_type(value, kind, where: str) -> None:
  if kind is float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok and not math.isfinite(value) and not where.endswith('loss'):
      raise SchemaError(f'{where} is {value}, expected a finite number')
  elif kind is int:
    ok = isinstance(value, int) and not isinstance(value, bool)
  else:
    ok = isinstance(value, kind)
  if not ok:
    raise SchemaError(f'{where} is {type(value).__name__} {value!r:.40}, expected {kind.__name__}')


def check_epoch(rec, where: str) -> dict:
  """Checks one epoch record (a dict with EPOCH_FIELDS); returns it."""
  if not isinstance(rec, dict):
    raise SchemaError(f'{where} is {type(rec).__name__}, expected an epoch record (an object)')
  for name, kind in EPOCH_FIELDS.items():
    if name not in rec:
      raise SchemaError(f'{where} has no {name!r} (an epoch record has {", ".join(EPOCH_FIELDS)})')
    _check_type(rec[name], kind, f'{where}.{name}')
  if not 0.0 <= rec['test_accuracy'] <= 1.0:
    raise SchemaError(f'{where}.test_accuracy is {rec["test_accuracy"]}, expected 0..1')
  return rec


def check_results(results, path: str = 'results.json') -> dict:
  """Checks a parsed results.json against the schema; returns it unchanged."""
  if not isinstance(results, dict):
    raise SchemaError(f'{path}: expected an object, found {type(results).__name__}')
  for name, kind in RESULTS_FIELDS.items():
    if name not in results:
      raise SchemaError(
        f'{path}: no {name!r} field (a results file has {", ".join(RESULTS_FIELDS)})'
      )
    _check_type(results[name], kind, f'{path}: {name}')
  for name, kind in OPTIONAL_FIELDS.items():
    if name in results:
      _check_type(results[name], kind, f'{path}: {name}')
  if results['status'] not in STATUSES:
    raise SchemaError(f'{path}: status {results["status"]!r} is not one of {", ".join(STATUSES)}')
  if results['backend'] not in BACKENDS:
    raise SchemaError(f'{path}: backend {results["backend"]!r} is not one of {", ".join(BACKENDS)}')
  if results['status'] == 'completed' and 'final' not in results:
    raise SchemaError(f'{path}: a completed run has no "final" field')
  for i, rec in enumerate(results['epochs']):
    check_epoch(rec, f'{path}: epochs[{i}]')
  return results


def load_results(path: str) -> dict:
  """Reads and checks results.json; SchemaError (one line) for unreadable or malformed files."""
  try:
    with open(path) as f:
      results = json.load(f)
  except OSError as e:
    raise SchemaError(f'{path}: cannot read it ({e.strerror})') from None
  except ValueError as e:
    raise SchemaError(f'{path}: not JSON ({e})') from None
  return check_results(results, path)


def load_metrics(path: str) -> list[dict]:
  """Reads and checks metrics.jsonl: its epoch records, in order."""
  records = []
  try:
    with open(path) as f:
      for n, line in enumerate(f, 1):
        if not line.strip():
          continue
        try:
          rec = json.loads(line)
        except ValueError as e:
          raise SchemaError(f'{path}:{n}: not JSON ({e})') from None
        records.append(check_epoch(rec, f'{path}:{n}'))
  except OSError as e:
    raise SchemaError(f'{path}: cannot read it ({e.strerror})') from None
  return records
