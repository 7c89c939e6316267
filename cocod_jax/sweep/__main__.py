"""`python -m cocod_jax.sweep --config=FILE[:ARG] --workdir=DIR [flags]`: the runner's CLI.

Exit status: 0 when every point is DONE or DIVERGED (and after a dry run or a Slurm
submission), 1 otherwise (and when sbatch refused a job), 2 for a refused sweep (every reason
printed, nothing written).
"""

import sys

from absl import app

from cocod_jax.config import errors
from cocod_jax.config import flags as cocod_flags
from cocod_jax.sweep import runner
from cocod_jax.sweep import slurm

REFUSED = 'sweep refused ({n} problem(s)); nothing was written'


def _overrides(items) -> dict:
  """{FIELD: VALUE text} of the --set flags; UsageError for an item without `=`."""
  out = {}
  for item in items:
    path, sep, text = item.partition('=')
    if not sep or not path:
      raise errors.UsageError(
        f'--set={item} is invalid; allowed: FIELD=VALUE, e.g. --set=data_dir=/data'
      )
    out[path] = text
  return out


def _run(f) -> int:
  common = dict(retry_failed=f.retry_failed, rerun_stale=f.rerun_stale, timeout_s=f.timeout_s)
  common.update(overrides=_overrides(f.set), overrides_as_text=True)
  how = dict(parallel=f.parallel, launcher=f.launcher, link_rate=f.link_rate)
  how.update(dry_run=f.dry_run, report_only=f.report_only, fail_fast=f.fail_fast)
  records = runner.run_sweep(f.config, f.workdir, slurm_args=tuple(f.slurm_arg), **how, **common)
  if f.dry_run or f.launcher == 'slurm':
    return 0
  return errors.EXIT_OK if runner.finished(records) else errors.EXIT_NOT_FINISHED


def main(argv) -> int:
  """Runs the sweep of --config in --workdir; returns the exit status."""
  if len(argv) > 1:
    errors.report(f'unexpected arguments {argv[1:]}')
    return errors.EXIT_USAGE
  try:
    return _run(cocod_flags.FLAGS)
  except errors.UsageError as e:
    errors.report(e, footer=REFUSED)
    return errors.EXIT_USAGE
  except slurm.SubmitError as e:
    errors.report(e)
    return 1


if __name__ == '__main__':
  cocod_flags.define_sweep_flags()
  app.run(
    lambda argv: sys.exit(main(argv)),
    flags_parser=lambda a: cocod_flags.parse(a, 'sweep', config_overrides=True),
  )
