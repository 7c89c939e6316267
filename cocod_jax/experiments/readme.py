"""The generated parts of README.md and docs/results.md, rendered from what they describe.

    .venv/bin/python -m cocod_jax.experiments.readme --check   # exit 1 when a part differs
    .venv/bin/python -m cocod_jax.experiments.readme --write   # rewrites the parts in place

Each part sits between its BEGIN and END markers:

- docs/results.md, the results: artefact by artefact (docs/paper-cpu/<name>.md and .json, then
  the archived records of earlier builds in docs/archive/), the artefact's own Markdown under a
  heading, with a line from its JSON saying which commit(s) its runs were made at, which commit
  rendered it, the command and the machine.
- README.md, the benchmark's targets: each target line of docs/bench/bench.md, with where and when
  it was measured.
- README.md, the exit statuses: the table of cocod_jax/config/errors.py (EXIT_CODES).

tests/readme_test.py checks that every part equals this rendering, so a figure or a status in
the documents cannot drift from its source.
"""

import dataclasses
import json
import os
import re
import sys
from typing import Callable

from cocod_jax.config import errors
from cocod_jax.record import files
from cocod_jax.record import provenance

FOLDER = os.path.join('docs', 'paper-cpu')
# Records of earlier builds that no make target remakes (docs/archive/README.md names each one's
# build); their provenance line says so.
ARCHIVE = os.path.join('docs', 'archive')
BENCH = os.path.join('docs', 'bench')
# The paper's artefacts, the long schedule, the overlap options (docs/paper-cpu/).
ARTEFACTS = (
  'table1', 'table2', 'fig2', 'fig5', 'fig3', 'fig6', 'fig4', 'ablation', 'long_schedule',
  'overlap',
)  # fmt: skip
# The archived records rendered into docs/results.md after them (docs/archive/).
ARCHIVED = ('corrections',)


def _marker(name: str, end: bool = False) -> str:
  if end:
    return f'<!-- end of {name} -->'
  return f'<!-- {name}: rendered by python -m cocod_jax.experiments.readme; do not edit -->'


def _tree(dirty) -> str:
  return {True: ' (tree dirty)', False: ''}.get(dirty, ' (tree unknown)')


def provenance_line(data: dict, path: str) -> str:
  """Where an artefact comes from, in one line: its runs' commits (from the runs' own records)
  beside the render's, the command and the machine."""
  render = f'{str(data.get("commit", "unknown"))[:12]}{_tree(data.get("dirty"))}'
  runs = data.get('run_commits')
  if runs:
    made = '; '.join(f'{r["commit"][:12]}{_tree(r["dirty"])}: {r["runs"]}' for r in runs)
    where = f'runs at {made}; rendered at {render}'
  else:
    where = (
      f'rendered at {render}; the commits of its runs were not recorded (made before artefacts '
      'kept them), so its runs are of that build or an earlier one'
    )
  machine = data.get('hardware') or data.get('machine') or '?'
  return f'*`{path}`: {where}; `{data.get("command", "?")}`; {machine}.*'


def section(name: str, root: str, folder: str = FOLDER) -> str | None:
  """One artefact's part of the results (its files in `folder`); None when it has not been
  made."""
  md, js = (os.path.join(root, folder, f'{name}.{ext}') for ext in ('md', 'json'))
  if not (os.path.exists(md) and os.path.exists(js)):
    return None
  with open(md) as f:
    lines = f.read().rstrip('\n').split('\n')
  with open(js) as f:
    data = json.load(f)
  title = lines[0].lstrip('# ').strip()
  body = '\n'.join(lines[1:]).strip('\n')
  body = re.sub(r'^#+ ', '#### ', body, flags=re.M)  # The artefact's own headings, under ours.
  # Images are named relative to the artefact's folder; docs/results.md sits one level up.
  body = re.sub(r'\]\(([\w.-]+\.png)\)', rf']({os.path.basename(folder)}/\1)', body)
  line = provenance_line(data, f'{folder}/{name}.json')
  return f'### {title}\n\n{line}\n\n{body}\n'


def results(root: str) -> str:
  parts = [section(n, root) for n in ARTEFACTS] + [section(n, root, ARCHIVE) for n in ARCHIVED]
  return '\n'.join(s for s in parts if s is not None)


def bench_targets(root: str) -> str:
  """The benchmark's target lines, each section's as bench.md prints them, and where they were
  measured."""
  md, js = (os.path.join(root, BENCH, f'bench.{ext}') for ext in ('md', 'json'))
  if not (os.path.exists(md) and os.path.exists(js)):
    return 'Not measured yet: `make bench` writes runs/bench/, which docs/bench/ holds.'
  with open(md) as f:
    lines = f.read().split('\n')
  measured = next((line for line in lines if line.startswith('Measured')), 'Measured: ?')
  targets = [
    line for line in lines if line.startswith('- ') and line.endswith((': met', ': MISSED'))
  ]
  return '\n'.join([measured, '', *targets])


def exit_codes(root: str) -> str:
  del root
  rows = [f'| {code} | {meaning} |' for code, meaning in sorted(errors.EXIT_CODES.items())]
  return '\n'.join(['| status | meaning |', '|---|---|', *rows])


@dataclasses.dataclass(frozen=True)
class Part:
  """A generated part: the document (relative to the checkout), its marker name, its renderer."""

  path: str
  name: str
  render: Callable[[str], str]

  def splice(self, text: str, root: str) -> str:
    """`text` with this part's block replaced by its rendering."""
    begin, end = _marker(self.name), _marker(self.name, end=True)
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
      raise ValueError(f'{self.path} lacks the markers {begin!r} ... {end!r}')
    block = f'{begin}\n\n{self.render(root)}\n\n{end}'
    return text[:start] + block + text[stop + len(end) :]


PARTS = (
  Part(os.path.join('docs', 'results.md'), 'results', results),
  Part('README.md', 'benchmark targets', bench_targets),
  Part('README.md', 'exit codes', exit_codes),
)


def rendered(root: str = provenance.ROOT) -> dict[str, tuple[str, str]]:
  """{document: (its text now, its text with every part rendered)}."""
  out = {}
  for part in PARTS:
    path = os.path.join(root, part.path)
    if path not in out:
      with open(path) as f:
        text = f.read()
      out[path] = (text, text)
    now, new = out[path]
    out[path] = (now, part.splice(new, root))
  return out


USAGE = 'usage: python -m cocod_jax.experiments.readme --check | --write'


def main(argv) -> int:
  args = argv[1:]
  if args in (['-h'], ['--help'], ['--helpshort']):
    print(__doc__)
    return errors.EXIT_OK
  if args not in (['--check'], ['--write']):
    print(f'error: {USAGE} (got {" ".join(args) or "no argument"})', file=sys.stderr)
    return errors.EXIT_USAGE
  try:
    documents = rendered()
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return errors.EXIT_USAGE
  stale = [path for path, (now, new) in documents.items() if now != new]
  if args == ['--check']:
    for path in stale:
      print(f'{path}: differs from what it is rendered from; run '
            'python -m cocod_jax.experiments.readme --write',
            file=sys.stderr)  # fmt: skip
    return errors.EXIT_NOT_FINISHED if stale else errors.EXIT_OK
  for path in stale:
    files.write_atomic(path, documents[path][1])
    print(f'rewrote {os.path.relpath(path, provenance.ROOT)}')
  return errors.EXIT_OK


if __name__ == '__main__':
  sys.exit(main(sys.argv))
