"""Files written whole or not at all: through a temporary file beside the target and
`os.replace`, so a reader (another rank, the sweep runner, a rerun after a kill) never sees half
of one. The temporary name carries the writer's pid: processes that write the same file do not
trample each other's temporary."""

import json
import os


def write_atomic(path: str, text: str) -> None:
  """Writes `text` to `path` atomically."""
  tmp = f'{path}.tmp{os.getpid()}'
  with open(tmp, 'w') as f:
    f.write(text)
  os.replace(tmp, path)


def write_json_atomic(path: str, obj, indent: int | None = 2) -> None:
  """Writes `obj` as JSON (one line when `indent` is None) to `path` atomically."""
  write_atomic(path, json.dumps(obj, indent=indent) + '\n')
