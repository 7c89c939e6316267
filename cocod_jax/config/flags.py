"""Every absl flag of the package's entry points, defined once, here.

Each entry point calls its `define_*` before `app.run` (never at import: the modules are also
imported as libraries, and absl refuses a flag defined twice):

- `define_main_flags`: `python -m cocod_jax.main` (--config, --workdir, --verbose).
- `define_sweep_flags`: `python -m cocod_jax.sweep`.
- `define_prepare_data_flags`: `python -m cocod_jax.prepare_data`.

The runner's flags (--parallel, --launcher, --dry_run, ...) are shared by the sweep runner and
the experiments and are defined by one function, `define_runner_flags`. The experiments' own
flags, and which of them each experiment reads, are cocod_jax/experiments/flags.py's (its
`parse` hands `parse` here the flags to refuse). The benchmark scripts in launch/ keep their
own few flags beside their code.
"""

import re

from absl import flags
from ml_collections import config_flags

FLAGS = flags.FLAGS
DEFAULT_TIMEOUT_S = 7 * 24 * 3600.0  # A point may run for a week before the runner ends it.
LAUNCHERS = ('local', 'slurm')


def define_main_flags() -> None:
  """--config (a config file, locked: an override cannot add a field), --workdir (not with
  --show_config), --verbose, --show_config."""
  flags.DEFINE_string('workdir', None, 'Directory for results.json, final_params.npz, summaries.')
  config_flags.DEFINE_config_file(
    'config', None, 'Training configuration file FILE[:ARG].', lock_config=True
  )
  flags.DEFINE_bool('verbose', False, 'Also print the Python traceback of a refused input.')
  flags.DEFINE_bool(
    'show_config',
    False,
    'Print every field of --config (its overrides applied), its value and what it means; run '
    'nothing, write nothing.',
  )
  flags.mark_flags_as_required(['config'])
  flags.register_multi_flags_validator(
    ['workdir', 'show_config'],
    lambda given: given['workdir'] is not None or given['show_config'],
    message='--workdir is required (where the run writes), unless --show_config',
  )


def define_runner_flags(workdir_default: str | None, workdir_help: str) -> None:
  """What the sweep runner and the experiments both take: where, how and whether to run."""
  flags.DEFINE_string('workdir', workdir_default, workdir_help)
  flags.DEFINE_integer('parallel', 1, 'Points at once (sweeps of one-host points only).')
  flags.DEFINE_enum('launcher', 'local', list(LAUNCHERS), 'Run here, or submit to Slurm.')
  flags.DEFINE_bool('dry_run', False, 'Print the states and commands; write nothing.')
  flags.DEFINE_bool('report_only', False, 'Render from what is on disk; run nothing.')
  flags.DEFINE_bool('retry_failed', False, 'Run FAILED points again.')
  flags.DEFINE_string(
    'link_rate',
    '',
    'Run MPI points on the simulated link RATE[/BURST[/MTU]] (launch/simnet.sh, e.g. 1gbit or '
    '50mbit/8kb/8000 for messages of a few kB; needs root); empty: the real network.',
  )


def define_sweep_flags() -> None:
  """The flags of `python -m cocod_jax.sweep`."""
  flags.DEFINE_string('config', None, 'The experiment file and its sweep argument: FILE[:ARG].')
  define_runner_flags(None, 'Where points/ and sweeps/<name>/ go.')
  flags.DEFINE_bool('rerun_stale', False, 'Move STALE points aside and run them again.')
  flags.DEFINE_bool('fail_fast', False, 'Start no further point after one fails.')
  flags.DEFINE_float('timeout_s', DEFAULT_TIMEOUT_S, 'Seconds a point may run.')
  flags.DEFINE_multi_string(
    'set', [], 'FIELD=VALUE set on every point, e.g. data_dir=/data (or --config.FIELD=VALUE).'
  )
  flags.DEFINE_multi_string(
    'slurm_arg',
    [],
    'sbatch option of the submitted jobs, e.g. --partition=gpu, --time=4:00:00 (default a day), '
    "--gpus-per-task=1, --ntasks-per-node=4 (an MPI point's ranks over nodes).",
  )
  flags.mark_flags_as_required(['config', 'workdir'])


def define_prepare_data_flags(datasets) -> None:
  """The flags of `python -m cocod_jax.prepare_data`; `datasets`: the names it can prepare."""
  flags.DEFINE_list('dataset', ['cifar10'], f'Datasets to prepare: {list(datasets)}.')
  flags.DEFINE_string(
    'data_dir', '', 'TFDS data directory (default: $TFDS_DATA_DIR, else ~/tensorflow_datasets).'
  )


def list_in_help(left_out=(), module: str | None = None) -> None:
  """Makes the flags defined here, and those of `module` (an entry point's own flags module),
  the entry point's own, so that --helpshort lists them (absl lists the main module's flags, and
  these are defined in other modules), but for the flags of `left_out` (those an experiment does
  not read: --helpfull lists them all)."""
  import sys  # pylint: disable=g-import-not-at-top

  by_module = FLAGS.flags_by_module_dict()
  for owner in (__name__, module) if module else (__name__,):
    for flag in by_module.get(owner, []):
      if flag.name not in left_out:
        FLAGS.register_key_flag_for_module(sys.argv[0], flag)


_HELP = ('-h', '-?', '--help', '--helpshort', '--helpfull', '--helpxml')

# absl's reasons for a refused flag value -> what is allowed, said as every other refusal says it.
_ALLOWED = (
  ('is not a non-negative integer', lambda m: 'an integer >= 0'),
  ('is not a positive integer', lambda m: 'an integer >= 1'),
  ('value should be one of <(.*)>', lambda m: ', '.join(m.group(1).split('|'))),
  (r'invalid literal for int\(\)', lambda m: 'an integer'),
  ('could not convert string to float', lambda m: 'a number'),
  ('Non-boolean argument', lambda m: 'true or false'),
)


def flag_problem(error, name: str = '') -> str:
  """absl's refusal of a command line, with each flag named as it is typed: `--seeds=-1 is
  invalid; allowed: an integer >= 0`, `--sedes is not a flag of table1; did you mean --seeds?`
  (absl says `flag --seeds=-1: -1 is not a non-negative integer`, `Unknown command line flag
  'sedes'`). `name`: the entry point, said where no flag is named; other errors as absl says them.
  """
  text = ' '.join(str(error).split())
  where = f' of {name}' if name else ''
  value = re.fullmatch(r'flags? (--[^=\s]+=.*?): (.*)', text)
  if value:
    given, why = value.groups()
    for pattern, allowed in _ALLOWED:
      found = re.search(pattern, why)
      if found:
        return f'{given} is invalid; allowed: {allowed(found)}'
    return f'{given} is invalid: {why}'
  unknown = re.fullmatch(r"Unknown command line flag '([^']*)'(?:\. Did you mean: (.*) \?)?", text)
  if unknown:
    flag, near = unknown.groups()
    hint = ' or '.join(f'--{n.strip()}' for n in near.split(',')) if near else ''
    return f'--{flag} is not a flag{where}' + (f'; did you mean {hint}?' if hint else '')
  missing = re.fullmatch(r'Missing value for flag (--\S+)', text)
  if missing:
    return f'{missing.group(1)} is given without a value; allowed: {missing.group(1)}=VALUE'
  return f'{name}: {text}' if name else text


def read(argv):
  """FLAGS(argv), where a help flag, having printed the help, exits 0 (absl exits 1)."""
  try:
    return FLAGS(argv)
  except SystemExit as e:
    if e.code == 1 and any(a.split('=')[0] in _HELP for a in argv[1:]):
      raise SystemExit(0) from None
    raise


def parse(
  argv,
  name: str,
  config_overrides: bool = False,
  left_out=(),
  refusal=None,
  module: str | None = None,
):
  """absl's flag parsing for an entry point (app.run's `flags_parser`), with every refusal one
  line: an unknown flag (with absl's nearest match), a bad value or a missing required flag, and
  arguments that are not flags. `error: <name>: ...` on stderr, exit status 2.

  With `config_overrides` (the sweep runner) `--config.FIELD=VALUE` is taken as the entry point
  `cocod_jax.main` takes it, an override of every point (the same as `--set FIELD=VALUE`).

  A flag of `left_out` given on the command line is refused with the line `refusal(flag)`, exit
  2; `module` names the entry point's own flags module, whose flags --helpshort lists too
  (experiments/flags.py's `parse` passes the flags an experiment does not read, and itself).
  """
  from cocod_jax.config import errors  # pylint: disable=g-import-not-at-top

  if config_overrides:
    argv = [f'--set={a[len("--config.") :]}' if a.startswith('--config.') else a for a in argv]
  list_in_help(left_out, module)
  try:
    rest = read(argv)
  except flags.Error as e:
    errors.fail(errors.UsageError(flag_problem(e, name)), errors.EXIT_USAGE)
  for flag in left_out:
    if flag in FLAGS and FLAGS[flag].present:
      errors.fail(errors.UsageError(refusal(flag)), errors.EXIT_USAGE)
  if len(rest) > 1:
    extra = ' '.join(rest[1:])
    problem = f'{name}: unexpected arguments {extra!r}; every input is a --flag=value'
    errors.fail(errors.UsageError(problem + ' (--helpshort lists them)'), errors.EXIT_USAGE)
  return rest


def _override_error(error, argv):
  """What to say about a command line of `cocod_jax.main` that absl or ml_collections refused:
  the first override that cannot be set on the config (set as the sweep runner sets it), else
  absl's own line."""
  from cocod_jax.config import errors  # pylint: disable=g-import-not-at-top
  from cocod_jax.config import loader  # pylint: disable=g-import-not-at-top

  spec = next((a.split('=', 1)[1] for a in argv if a.startswith('--config=')), None)
  if spec is not None:
    try:
      config = loader.load(spec)
      config.lock()
      for arg in argv:
        if arg.startswith('--config.'):
          path, _, text = arg[len('--config.') :].partition('=')
          loader.set_field(config, path, text, from_text=True)
    except errors.UsageError as e:
      return e
  text = str(error).splitlines()[0]
  if text.startswith('flags '):  # A validator of several flags: its message names them itself.
    return text.split(': ', 1)[-1].strip()
  return flag_problem(text, 'main') if isinstance(error, flags.Error) else text.strip()


def parse_main(argv):
  """The flag parsing of `cocod_jax.main` (its app.run `flags_parser`): every refusal one line
  and exit status 2, a config file of the wrong type or missing a required field included."""
  from cocod_jax.config import errors  # pylint: disable=g-import-not-at-top
  from cocod_jax.config import loader  # pylint: disable=g-import-not-at-top

  verbose = '--verbose' in argv
  list_in_help()
  try:
    rest = read(argv)
    # ml_collections defers a config file that failed to load until the config is first read.
    if FLAGS['config'].present:
      FLAGS.config.keys()
  except Exception as e:  # pylint: disable=broad-except
    errors.fail(_override_error(e, argv), errors.EXIT_USAGE, verbose=verbose)
  if FLAGS['config'].present:
    try:  # The right type, every required field.
      loader.checked(FLAGS.config, FLAGS['config'].config_filename)
    except errors.UsageError as e:
      errors.fail(e, errors.EXIT_USAGE, verbose=verbose or FLAGS.verbose)
  return rest
