"""The run's outputs, written by the chief only: results.json (rewritten whole, atomically, at the
end or on divergence), metrics.jsonl (one line an epoch), TensorBoard scalars and the console.

Not clu's metric writers: metrics.jsonl is rewritten whole and atomically at every epoch end, from
the history a checkpoint holds when a run resumes (epochs after the checkpoint are run again and
must not appear twice), and every write goes through `workdir.writing`, which turns a full disk
into one line and exit 74 with the earlier files intact; clu's writers append, and would need
both wrapped around them. The TensorBoard events come from tensorboardX, without TensorFlow.
"""

import os

import flax
import numpy as np

from cocod_jax import shares
from cocod_jax import timeline as timeline_lib
from cocod_jax.record import files
from cocod_jax.record import workdir as workdir_lib


def start_line(workdir: str, options, cluster, workers: int) -> str:
  """The run's first console line: where its results go, the algorithm with the options that
  shape its rounds (period, delay, fragments), and the layout (workers, processes, devices)."""
  from cocod_jax import algorithms  # pylint: disable=g-import-not-at-top

  cls = algorithms.ALGORITHMS.get(options.name)
  what = [options.name]
  if cls is not None and issubclass(cls, algorithms.base.RoundAlgorithm):
    what.append(f'period={options.period}')
  if options.name == 'cocod_sgd':
    what.append(f'delay={options.delay}')
    if options.get('correction', 'cocod') != 'cocod':
      what.append(f'correction={options.correction}')
  fragments = options.get('fragments', 1)
  if isinstance(fragments, int) and fragments > 1:
    what.append(f'fragments={fragments}')
  lay = cluster.layout()
  if cluster.backend == 'mpi':
    n = lay['processes']
    where = (
      f'{n} rank{"s" if n > 1 else ""} of {lay["workers_per_process"]} each, '
      f'{lay["devices_per_process"]} {lay["platform"]} device(s) a rank'
    )
  else:
    where = f'one process, {lay["devices_per_process"]} {lay["platform"]} device(s)'
  return f'run: {" ".join(what)}; {workers} workers on {where}; workdir {os.path.abspath(workdir)}'


def where_written(workdir: str) -> str:
  """The run's last console line: where its results, TensorBoard events and final model are."""
  root = os.path.abspath(workdir)
  return (
    f'written: {os.path.join(root, "results.json")}, {os.path.join(root, "final_params.npz")} '
    f'and the TensorBoard events in {root} (tensorboard --logdir={root})'
  )


class Recorder:
  """The run's outputs, written by the chief only: results.json (rewritten whole, atomically, at
  the end or on divergence), metrics.jsonl (one line per epoch), TensorBoard scalars, the console.
  """

  def __init__(
    self, workdir, record: dict, plan, period: int, cluster, dataset, records=(), auto=None
  ):
    """`record`: the run's config as given (a dict); `period`: the k it runs with."""
    self.workdir, self.num_epochs = workdir, plan.num_epochs
    self.enabled = cluster.is_chief
    self.records = list(records)  # Continued from a checkpoint when resuming.
    self.results = dict(
      config=record,
      backend=cluster.backend,
      batch_sizes=plan.sizes,
      weights=plan.weights,
      steps_per_epoch=plan.steps_per_epoch,
      train_examples=len(dataset.y_train),
      test_examples=len(dataset.y_test),  # Tables judge accuracy gaps against this resolution.
      workers=shares.worker_table(plan.speeds, plan.sizes, plan.local_periods(period)),
      layout=cluster.layout(),
      epochs=self.records,
    )
    if auto:  # `record` keeps period='auto' (the sweep's hashes); k and its inputs are here.
      self.results['period_auto'] = auto
    waiting = [w for w in self.results['workers'] if w['idle_fraction_model'] > 0]
    if waiting and self.enabled:
      idle = ', '.join(f'{w["idle_fraction_model"]:.0%}' for w in waiting)
      print(
        f'heterogeneous cluster without balance: workers {[w["worker"] for w in waiting]} wait '
        f'for the slowest, {idle} of each round by the time model (results.json: workers; '
        'under MPI the measured waits are timing.ranks[r].exposed_comm_s)',
        flush=True,
      )
    self.writer = None
    if self.enabled:
      # metrics.jsonl restarts from the checkpoint's history: epochs after it are run again.
      self._write_metrics()
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top

      with workdir_lib.writing('the TensorBoard events', workdir):
        self.writer = SummaryWriter(workdir)

  def _write_metrics(self):
    """metrics.jsonl, rewritten whole (a full disk leaves the last complete one in place)."""
    with workdir_lib.writing('metrics.jsonl', self.workdir):
      text = ''.join(files.dumps(rec) + '\n' for rec in self.records)
      files.write_atomic(os.path.join(self.workdir, 'metrics.jsonl'), text)

  def _write_results(self):
    with workdir_lib.writing('results.json', self.workdir):
      files.write_json_atomic(os.path.join(self.workdir, 'results.json'), self.results)

  def epoch(self, **rec):
    if not self.enabled:
      return
    self.records.append(rec)
    with workdir_lib.writing('the TensorBoard events', self.workdir):
      for k, v in rec.items():
        if k != 'epoch':
          self.writer.add_scalar(k, v, rec['epoch'])
    self._write_metrics()
    # train_time_s is cumulative (every epoch so far); the epoch's own time is printed beside it.
    before = self.records[-2]['train_time_s'] if len(self.records) > 1 else 0.0
    print(
      f'epoch {rec["epoch"]:3d}/{self.num_epochs}  train_loss {rec["train_loss"]:.4f}  '
      f'test_loss {rec["test_loss"]:.4f}  test_acc {rec["test_accuracy"]:.4f}  '
      + (f'avg_train_loss {rec["avg_train_loss"]:.4f}  ' if 'avg_train_loss' in rec else '')
      + f'train_time {rec["train_time_s"]:.1f}s total ({rec["train_time_s"] - before:.1f}s '
      'this epoch)',
      flush=True,
    )

  def diverged(self, **what):
    if self.enabled:
      self.results.update(status='diverged', diverged=what)
      self._write_results()

  def completed(self, final, timing, model):
    """The final averaged `model`, its figures `final` and the combined `timing` (or None)."""
    if not self.enabled:
      return None
    self.results.update(status='completed', final=final)
    print(
      f'final (averaged model)  test_loss {final["test_loss"]:.4f}  '
      f'test_acc {final["test_accuracy"]:.4f}  train_time {final["train_time_s"]:.1f}s',
      flush=True,
    )
    if timing is not None:
      self.results['timing'] = timeline_lib.combine(timing)
      print(timeline_lib.describe(self.results['timing']), flush=True)
    flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(model), sep='/')
    tmp = os.path.join(self.workdir, 'final_params.tmp.npz')
    with workdir_lib.writing('final_params.npz', self.workdir):
      try:
        np.savez(tmp, **{k: np.asarray(v) for k, v in flat.items()})
        os.replace(tmp, os.path.join(self.workdir, 'final_params.npz'))
      finally:
        if os.path.exists(tmp):
          os.remove(tmp)
    self._write_results()
    print(where_written(self.workdir), flush=True)
    return self.results

  def close(self):
    if self.writer is not None:
      self.writer.close()
