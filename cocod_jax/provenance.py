"""Where the code that ran came from: the checkout's root, its git commit and whether it was dirty.

One reader of the commit for the sweep runner (point.json, the STALE flag) and the experiments'
artefacts (every .json carries the commit it was made at).
"""

import os
import subprocess

# The checkout (the editable install points here): the runs' working directory, so that
# experiment files and launch/ scripts are named relative to it.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*args: str) -> subprocess.CompletedProcess | None:
  try:
    return subprocess.run(
      ['git', *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
    )
  except (OSError, subprocess.SubprocessError):
    return None


def commit() -> str:
  """HEAD's commit in ROOT, or 'unknown' without git."""
  p = _git('rev-parse', 'HEAD')
  out = p.stdout.strip() if p is not None and p.returncode == 0 else ''
  return out or 'unknown'


def dirty() -> bool | None:
  """Whether tracked files differ from HEAD (None without git)."""
  p = _git('status', '--porcelain', '--untracked-files=no')
  if p is None or p.returncode != 0:
    return None
  return bool(p.stdout.strip())


def command() -> str:
  """The command line of this process, as `python -m module args` when run as a module."""
  import sys  # pylint: disable=g-import-not-at-top

  spec = getattr(sys.modules.get('__main__'), '__spec__', None)
  head = f'python -m {spec.name}' if spec is not None else f'python {sys.argv[0]}'
  return ' '.join([head, *sys.argv[1:]])
