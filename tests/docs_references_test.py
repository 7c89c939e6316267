"""Every module, function and repository path that the documents (README.md, docs/*.md) and the
docstrings and comments of the code (cocod_jax/, launch/, configs/, tests/, requirements*.txt)
name exists (issue 42 item 4: usage.md named a module by an import alias of the tests,
requirements.txt a module that had moved). Read as text and parsed with `ast`: nothing imported,
no JAX. A path whose file name is one letter (`configs/X.py`) is a placeholder."""

import ast
import functools
import glob
import importlib.util
import io
import os
import re
import tokenize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ('cocod_jax', 'configs', 'launch', 'tests')
# A path of the repository: under one of its folders, a file with its extension.
PATH = re.compile(
  r'(?<![\w./-])((?:cocod_jax|configs|launch|tests|docs)/[\w./-]*?'
  r'\.(?:py|md|sh|sbatch|json|png|npz|txt|toml))(?![\w/-])'
)
# A dotted name in the project's packages: cocod_jax.record.schema, cocod_jax.main, ... and a
# module of launch/ as `python -m` runs it (a bare `launch.x` is as often a variable's field).
DOTTED = re.compile(r'(?<![\w./-])(cocod_jax(?:\.\w+)+|(?<=-m )launch(?:\.\w+)+)')
# In the documents, a call written `module.function(...)`.
CALL = re.compile(r'`(\w+)\.(\w+)\(')
# The usual short names of libraries: `tfds.load(...)` is tensorflow_datasets'.
ALIASES = {'tfds', 'np', 'jnp', 'plt'}


def _documents() -> list[str]:
  return ['README.md'] + sorted(glob.glob('docs/*.md', root_dir=ROOT))


def _sources() -> list[str]:
  found = []
  for package in PACKAGES:
    found += sorted(glob.glob(f'{package}/**/*.py', root_dir=ROOT, recursive=True))
  return found


def _read(path: str) -> str:
  with open(os.path.join(ROOT, path), encoding='utf-8') as f:
    return f.read()


def _prose_of_source(path: str) -> str:
  """The comments and docstrings of a Python file (its code left out)."""
  text = _read(path)
  parts = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
           if t.type == tokenize.COMMENT]  # fmt: skip
  for node in ast.walk(ast.parse(text)):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node, clean=False)
      if doc:
        parts.append(doc)
  return '\n'.join(parts)


def _texts() -> list[tuple[str, str]]:
  texts = [(path, _read(path)) for path in _documents()]
  texts += [(path, _prose_of_source(path)) for path in _sources()]
  texts += [(path, _read(path)) for path in sorted(glob.glob('requirements*.txt', root_dir=ROOT))]
  return texts


@functools.cache
def _defined(module_path: str) -> set[str]:
  """The names a module defines or imports at its top level."""
  tree = ast.parse(_read(module_path))
  names = set()
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      for target in targets:
        names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      names |= {(a.asname or a.name).split('.')[0] for a in node.names}
  return names


def _module_file(parts: list[str]) -> str | None:
  path = os.path.join(*parts)
  for candidate in (f'{path}.py', os.path.join(path, '__init__.py')):
    if os.path.exists(os.path.join(ROOT, candidate)):
      return candidate
  return None


def dotted_exists(name: str) -> bool:
  """Whether `name` (a.b.c) is a module of the project, or a module's top-level name."""
  parts = name.split('.')
  for i in range(len(parts), 0, -1):
    module = _module_file(parts[:i])
    if module is None:
      continue
    rest = parts[i:]
    if not rest:
      return True
    if rest[0] in _defined(module):
      return True
    return _module_file(parts[:i] + rest[:1]) is not None  # A submodule of a package.
  return False


@functools.cache
def _modules_by_name() -> dict[str, list[str]]:
  out = {}
  for path in _sources():
    name = os.path.basename(path)[:-3]
    if name == '__init__':  # A package, by its folder's name.
      name = os.path.basename(os.path.dirname(path))
    out.setdefault(name, []).append(path)
  return out


def test_every_named_path_exists():
  missing = []
  for path, text in _texts():
    for named in PATH.findall(text):
      if len(os.path.basename(named).split('.')[0]) == 1:
        continue  # A placeholder: configs/X.py.
      if not os.path.exists(os.path.join(ROOT, named)):
        missing.append(f'{path} names {named}')
  assert not missing, '\n'.join(missing)


def test_every_named_module_exists():
  missing = []
  for path, text in _texts():
    for named in DOTTED.findall(text):
      if not dotted_exists(named.rstrip('.')):
        missing.append(f'{path} names {named}')
  assert not missing, '\n'.join(missing)


def test_every_call_the_documents_name_is_of_a_module_that_has_it():
  # `module.function(...)`: a module of the project by its file name, holding that function.
  missing = []
  modules = _modules_by_name()
  for path in _documents():
    for module, function in CALL.findall(_read(path)):
      if module not in modules and (module in ALIASES or importlib.util.find_spec(module)):
        continue  # A library's (jax.transfer_guard, tfds.load).
      if module not in modules:
        missing.append(f'{path} names {module}.{function}(), and no module is named {module}')
      elif not any(function in _defined(m) for m in modules[module]):
        missing.append(f'{path} names {module}.{function}(), which {modules[module]} lack')
  assert not missing, '\n'.join(missing)


def test_the_checks_find_what_they_are_for():
  assert not dotted_exists('cocod_jax.results_schema')
  assert dotted_exists('cocod_jax.record.schema') and dotted_exists(
    'cocod_jax.record.schema.load_results'
  )
  assert not dotted_exists('cocod_jax.record.schema.no_such_function')
  assert PATH.findall('see `cocod_jax/workdir.py`, docs/usage.md.') == [
    'cocod_jax/workdir.py',
    'docs/usage.md',
  ]
  assert CALL.findall('read with `results_schema.load_results(path)`') == [
    ('results_schema', 'load_results')
  ]
