"""The README's measured results, rendered from the committed artefacts and nothing else.

    python -m cocod_jax.experiments.readme            # rewrites the block in README.md
    python -m cocod_jax.experiments.readme --check    # exit 1 when README.md differs

The block between BEGIN and END in README.md is, artefact by artefact (docs/paper-cpu/<name>.md
and .json), the artefact's own Markdown under a heading, with a line of provenance from its JSON
(commit, whether the tree was dirty, the command, the machine). tests/readme_test.py checks that
README.md holds exactly this rendering, so a figure in the README cannot drift from its artefact.
"""

import json
import os
import re
import sys

from cocod_jax import files
from cocod_jax import provenance

BEGIN = '<!-- results: rendered by python -m cocod_jax.experiments.readme; do not edit -->'
END = '<!-- end of results -->'
FOLDER = os.path.join('docs', 'paper-cpu')
ARTEFACTS = ('table1', 'table2', 'fig2', 'fig5', 'fig3', 'fig6', 'fig4', 'ablation', 'corrections')


def _provenance_line(data: dict) -> str:
  commit = str(data.get('commit', 'unknown'))[:12]
  dirty = {True: ', tree dirty', False: ', tree clean'}.get(data.get('dirty'), '')
  points = len(data.get('points', []))
  wall = data.get('runs_wall_s')
  wall = f' ({wall / 60:.0f} min of runs in all)' if wall else ''
  return (
    f'*Artefact `{FOLDER}/{{name}}.json`: commit {commit}{dirty}; {points} runs{wall}; '
    f'`{data.get("command", "?")}`; {data.get("hardware", "?")}.*'
  )


def section(name: str, root: str) -> str | None:
  """One artefact's part of the block; None when it has not been made."""
  md, js = (os.path.join(root, FOLDER, f'{name}.{ext}') for ext in ('md', 'json'))
  if not (os.path.exists(md) and os.path.exists(js)):
    return None
  with open(md) as f:
    lines = f.read().rstrip('\n').split('\n')
  with open(js) as f:
    data = json.load(f)
  title = lines[0].lstrip('# ').strip()
  body = '\n'.join(lines[1:]).strip('\n')
  # Images are named relative to the artefact's folder; the README sits two levels up.
  body = re.sub(rf'\]\(({re.escape(name)}(_\d+)?\.png)\)', rf']({FOLDER}/\1)', body)
  return f'### {title}\n\n{_provenance_line(data).format(name=name)}\n\n{body}\n'


def render(root: str = provenance.ROOT) -> str:
  parts = [s for s in (section(n, root) for n in ARTEFACTS) if s is not None]
  return BEGIN + '\n\n' + '\n'.join(parts) + '\n' + END


def splice(readme: str, block: str) -> str:
  """`readme` with the text from BEGIN to END replaced by `block`."""
  start, end = readme.find(BEGIN), readme.find(END)
  if start < 0 or end < start:
    raise ValueError(f'README.md lacks the markers {BEGIN!r} ... {END!r}')
  return readme[:start] + block + readme[end + len(END) :]


def main(argv) -> int:
  path = os.path.join(provenance.ROOT, 'README.md')
  with open(path) as f:
    readme = f.read()
  updated = splice(readme, render())
  if '--check' in argv[1:]:
    if updated != readme:
      print(f'{path}: the results block differs from the artefacts in {FOLDER}; run '
            'python -m cocod_jax.experiments.readme', file=sys.stderr)  # fmt: skip
      return 1
    return 0
  files.write_atomic(path, updated)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
