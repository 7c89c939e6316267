"""One error type for user mistakes, and one printer for it.

A user mistake (a misspelt field, a value of the wrong type or out of range, a dataset file that
cannot be used, a refused sweep) is a `UsageError` whose `problems` are one line each, naming the
field, the value and what is allowed. Every entry point prints it through `fail`: one
`error: ...` line per problem on stderr, no traceback unless asked for, exit status 2
(EXIT_USAGE). Narrower errors (`config_args.ConfigArgError`, `input_pipeline.DataError`) are
subclasses, so that one `except errors.UsageError` catches them all.
"""

import sys
import traceback
from typing import NoReturn

# Every exit status of the project's commands, one table (README prints it: tests/readme_test.py).
EXIT_OK = 0
EXIT_NOT_FINISHED = 1
EXIT_USAGE = 2
EXIT_DIVERGED = 3
EXIT_DISK_FULL = 74  # EX_IOERR: the run stopped on a write; earlier checkpoints are intact.
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: stopped by a signal after writing a checkpoint.
EXIT_TIMED_OUT = 124  # The `timeout` command's status: the sweep's --timeout_s ended the run.
EXIT_KILLED = 143  # 128 + SIGTERM: a second signal, or no checkpoint by the deadline.
EXIT_CODES = {
  EXIT_OK: 'finished: the run, every point of a sweep, every run of an artefact',
  EXIT_NOT_FINISHED: (
    'not finished: a sweep or an artefact with runs not done (their state says why); a '
    'dataset that could not be downloaded; an unexpected error (its traceback)'
  ),
  EXIT_USAGE: 'a usage error: one `error:` line a problem, nothing written',
  EXIT_DIVERGED: 'the run diverged (a NaN or Inf), stopped before any worker took it in',
  EXIT_DISK_FULL: 'a write failed (disk full, permissions): the earlier checkpoints are intact',
  EXIT_PREEMPTED: 'preempted (SIGTERM, SIGINT): a checkpoint written; the same command resumes',
  EXIT_TIMED_OUT: "a sweep's point ended by its --timeout_s (recorded in the point's state)",
  EXIT_KILLED: 'a second signal, or no checkpoint by checkpoint.preempt_deadline_s',
}


class UsageError(ValueError):
  """A user mistake; `problems` holds one line per reason, `str()` joins them."""

  def __init__(self, problems):
    self.problems = [problems] if isinstance(problems, str) else [str(p) for p in problems]
    super().__init__('\n'.join(self.problems))


def problems_of(error) -> list[str]:
  """The lines of `error`: a UsageError's problems, else the lines of its text."""
  if isinstance(error, UsageError):
    return list(error.problems)
  return str(error).splitlines() or [type(error).__name__]


def report(error, prefix: str = '', footer: str | None = None) -> None:
  """Prints `error` (an exception or a text) as `error: <prefix><line>` lines on stderr.

  Args:
    error: the exception or message; each of its lines becomes one `error:` line.
    prefix: put before every line, e.g. 'rank 1: ' under MPI.
    footer: one more `error:` line after the problems, e.g. what was not done because of them.
  """
  lines = problems_of(error)
  if footer:
    lines.append(footer.format(n=len(lines)))
  for line in lines:
    print(f'error: {prefix}{line}', file=sys.stderr, flush=True)


def fail(
  error,
  status: int = EXIT_USAGE,
  prefix: str = '',
  footer: str | None = None,
  verbose: bool = False,
) -> NoReturn:
  """Prints `error` as `report` does (after the traceback when `verbose`) and exits.

  Args:
    error: the exception or message.
    status: the exit status (2 for a user mistake).
    prefix: put before every line.
    footer: one more line after the problems; `{n}` in it is the number of problems.
    verbose: first print the Python traceback of `error` when it was raised, else of the
      exception being handled; nothing when there is neither (a problem found by a check).
  """
  if verbose:
    raised = error if isinstance(error, BaseException) and error.__traceback__ else None
    if raised is None and sys.exc_info()[1] is not None:
      raised = sys.exc_info()[1]
    if raised is not None:
      traceback.print_exception(raised, file=sys.stderr)
      sys.stderr.flush()
  report(error, prefix, footer)
  sys.exit(status)
