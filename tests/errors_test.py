"""config/errors.py: `fail` prints one `error:` line a problem and exits; with `verbose` it prints
the traceback of the error given (or of the exception being handled), and nothing more when there
is none: never 'NoneType: None'."""

import pytest

from cocod_jax.config import errors


def _fail(capsys, error, **kwargs) -> tuple[int, str]:
  with pytest.raises(SystemExit) as stop:
    errors.fail(error, **kwargs)
  return stop.value.code, capsys.readouterr().err


def _refuse():
  raise errors.UsageError(['algorithm.delay=0: must be >= 1', 'num_workers=0: must be >= 1'])


def test_without_verbose_one_line_a_problem(capsys):
  try:
    _refuse()
  except errors.UsageError as e:
    status, err = _fail(capsys, e)
  assert status == errors.EXIT_USAGE
  assert err == 'error: algorithm.delay=0: must be >= 1\nerror: num_workers=0: must be >= 1\n'


def test_verbose_outside_an_exception_prints_no_traceback(capsys):
  # A refusal found by a check, never raised: no traceback to show, and no 'NoneType: None'.
  status, err = _fail(capsys, errors.UsageError('algorithm.delay=0: must be >= 1'), verbose=True)
  assert status == errors.EXIT_USAGE
  assert err == 'error: algorithm.delay=0: must be >= 1\n'
  status, err = _fail(capsys, 'a text', status=errors.EXIT_NOT_FINISHED, verbose=True)
  assert (status, err) == (errors.EXIT_NOT_FINISHED, 'error: a text\n')


def test_verbose_prints_the_raised_errors_traceback(capsys):
  try:
    _refuse()
  except errors.UsageError as e:
    caught = e
  # Called after the except block has ended: the error's own traceback, not the handled one's.
  status, err = _fail(capsys, caught, verbose=True)
  assert status == errors.EXIT_USAGE and 'NoneType: None' not in err
  assert err.startswith('Traceback (most recent call last):') and 'in _refuse' in err
  assert err.endswith('error: num_workers=0: must be >= 1\n') and err.count('error: ') == 2


def test_verbose_inside_a_handler_prints_the_handled_exception(capsys):
  # A message made from the exception being handled (a text, not the exception): its traceback.
  try:
    _refuse()
  except errors.UsageError:
    status, err = _fail(capsys, 'could not read the config', verbose=True)
  assert status == errors.EXIT_USAGE and 'in _refuse' in err
  assert err.startswith('Traceback') and err.endswith('error: could not read the config\n')
