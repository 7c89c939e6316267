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

EXIT_USAGE = 2


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
    verbose: print the Python traceback of the exception being handled first.
  """
  if verbose:
    traceback.print_exc()
  report(error, prefix, footer)
  sys.exit(status)
