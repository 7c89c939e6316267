"""Where the code that ran came from: the checkout's root, its git commit and whether it was dirty.

One reader of the commit for the sweep runner (point.json, the STALE flag) and the experiments'
artefacts (every .json carries the commit it was made at).
"""

import os
import subprocess

# The checkout (the editable install points here): the runs' working directory, so that
# experiment files and launch/ scripts are named relative to it.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def machine() -> str:
  """The machine in one line: CPU cores and model, architecture, memory (XLA CPU results are not
  bitwise portable between CPU models, and timings belong to the machine that made them)."""
  import platform  # pylint: disable=g-import-not-at-top

  model = platform.processor() or platform.machine()
  try:
    with open('/proc/cpuinfo') as f:
      names = [line.split(':', 1)[1].strip() for line in f if line.startswith('model name')]
    model = names[0] if names else model
  except OSError:
    pass
  memory = ''
  try:
    pages, size = os.sysconf('SC_PHYS_PAGES'), os.sysconf('SC_PAGE_SIZE')
    memory = f', {pages * size / 2**30:.0f} GiB'
  except (ValueError, OSError, AttributeError):
    pass
  return f'{os.cpu_count()} CPU cores ({model}, {platform.machine()}){memory}'


def record() -> dict:
  """Where a measurement comes from: the commit, whether the tree was dirty, the command, the
  machine and the UTC time."""
  import datetime  # pylint: disable=g-import-not-at-top

  now = datetime.datetime.now(datetime.timezone.utc)
  return {
    'commit': commit(),
    'dirty': dirty(),
    'command': command(),
    'machine': machine(),
    'date': now.strftime('%Y-%m-%d %H:%M UTC'),
  }
