"""Files written whole or not at all: through a temporary file beside the target and
`os.replace`, so a reader (another rank, the sweep runner, a rerun after a kill) never sees half
of one. The temporary name carries the writer's pid: processes that write the same file do not
trample each other's temporary. A write that fails (a full disk) removes its temporary and
leaves the earlier file as it was.

JSON is strict: a non-finite float (NaN, Inf), which `json.dumps` would write as a bare `NaN` or
`Infinity` token that JSON readers refuse, is written as `null`.
"""

import contextlib
import json
import math
import os


def write_atomic(path: str, text: str) -> None:
  """Writes `text` to `path` atomically."""
  tmp = f'{path}.tmp{os.getpid()}'
  try:
    with open(tmp, 'w') as f:
      f.write(text)
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise


def finite(obj):
  """`obj` with every non-finite float (in dicts, lists and tuples) replaced by None."""
  if isinstance(obj, float):
    return obj if math.isfinite(obj) else None
  if isinstance(obj, dict):
    return {k: finite(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [finite(v) for v in obj]
  return obj


def dumps(obj, indent: int | None = None) -> str:
  """Strict JSON text of `obj` (non-finite floats as null)."""
  return json.dumps(finite(obj), indent=indent, allow_nan=False)


def write_json_atomic(path: str, obj, indent: int | None = 2) -> None:
  """Writes `obj` as strict JSON (one line when `indent` is None) to `path` atomically."""
  write_atomic(path, dumps(obj, indent=indent) + '\n')


def read_json(path: str):
  """The parsed JSON file at `path`, or None when it is missing or unreadable."""
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None
