"""`make bench`: every speed figure of the README, measured (root: the simulated network).

    .venv/bin/python launch/bench.py --out=runs/bench [--repeats=3] [--ratios=1,3]
        [--sections=overhead,comm,overlap,hetero] [--render_only]

Sections (each its own table and targets in bench.md):

- `overhead`: the training loop against a bare jitted loop of the same local step
  (launch/bench_overhead.py, one process; target: within 5%).
- `comm`: the MPI communicator against raw mpi4py on the same bytes and 2 ranks
  (launch/bench_comm.py), over shared memory and over the simulated link (targets: 80 KB within
  0.3 ms of raw; 44.7 MB on the link within 10% of raw).
- `checkpoint`: seconds to write and restore a checkpoint of ResNet18-sized state, one worker and
  16 stacked (launch/bench_checkpoint.py).
- `overlap`: the four algorithms on 2 MPI ranks inside `launch/simnet.sh`, whose loopback is
  rate-limited, so the allreduce really crosses a slow link. Calibration: S-SGD (nothing
  overlaps, so its Tp and Tc are clean) at two link rates; a fit `Tc = a + b / rate` gives the
  rate for each target `r = Tc/Tp`. For each r, `--repeats` rounds of the four algorithms (order
  rotated each repeat): time per step, speedup over the S-SGD run of the same repeat, the time
  model of docs/algorithms.md for the calibration's Tp and Tc at that rate (never the Tp and Tc of
  the runs it predicts), and the hidden fraction; then CoCoD-SGD
  with each `comm.staging` at the largest r, Pipe-SGD against its own Tp and Tc with the
  pipeline's refill at each epoch end, and a PNG of one measured round per algorithm.
- `streamed`: streamed CoCoD-SGD (`algorithm.fragments=5`, k = 5) with tau = 1 and with
  `delay=auto`, beside S-SGD, at r = 1, 3 and 6 (`--streamed_ratios`; rates from the
  calibration): its round time against max(k Tp, Tc) of the S-SGD run of the same repeat (target
  <= 1.10 with tau = 1 at r = 1 and 3), the tau each run used (at r ~ 6 a fragment's allreduce
  outlasts a step and `delay=auto` takes tau = 2), Tc of a fragment, the hidden fraction and the
  time model (docs/algorithms.md).
- `hetero`: a mixed cluster on equal hardware, rank 0 at half speed (`emulate_speeds`), at
  r = Tc / Tp_slow of about 1: S-SGD, S-SGD+PS, Pipe-SGD+PS, AsynLocal-SGD and CoCoD-SGD+PS, each
  against the time model for mixed clusters (from the calibration), per step and per epoch.
- `ranks`: 2 ranks x 8 workers each (16 workers at batch 128: the same 2048 examples a step as
  the overlap section's 2 x 1024), S-SGD and CoCoD-SGD at r = Tc/Tp of about 1: a probe S-SGD run
  gives this layout's Tp, the calibration's fit the link rate for Tc = Tp (the allreduce is one
  model whatever W is); then `--repeats` runs of each. Time per step, speedup, Tp, the local
  mean over the rank's 8 workers (Tl), Tc and the hidden fraction (target: CoCoD-SGD at least
  1.6 times as fast per step), and a PNG of one measured round of each.

Tc is the collective itself, without a fast rank's wait inside it for a slow one
(`timeline.combine`).

Medians with [min, max] over the repeats. Writes `bench.json` (every run's figures) and
`bench.md`; `--render_only` rewrites bench.md from an existing bench.json, and `--sections=...`
with some sections measures those again and keeps the others of bench.json (the mixed cluster
alone reuses the earlier calibration).

This file is the entry point and the order of the sections; the runs of each section are in
launch/bench_measure.py, the algorithms and the time model in launch/bench_model.py, bench.md's
text in launch/bench_render.py.
"""

import json
import os

from absl import app
from absl import flags

from cocod_jax.config import errors
from cocod_jax.config import flags as cocod_flags
from cocod_jax.record import files
from cocod_jax.record import provenance
from launch import bench_measure
from launch import bench_model
from launch import bench_render

flags.DEFINE_string('out', 'runs/bench', 'Output directory.')
flags.DEFINE_integer('repeats', 3, 'Runs per algorithm and ratio.')
flags.DEFINE_list('ratios', ['1', '3'], 'Target values of r = Tc/Tp.')
flags.DEFINE_list(
  'streamed_ratios', list(bench_model.STREAMED_RATIOS), 'Target r of the streamed section.'
)
flags.DEFINE_list('probe_rates_mbit', ['300', '1200'], 'Link rates of the calibration runs.')
flags.DEFINE_list('stagings', ['host', 'device'], 'comm.staging values to compare.')
flags.DEFINE_list(
  'sections', list(bench_render.SECTIONS), f'What to measure, of {bench_render.SECTIONS}.'
)
flags.DEFINE_string('comm_rate', '1gbit', 'Link rate of the communicator comparison on the link.')
flags.DEFINE_bool(
  'render_only', False, 'Rewrite bench.md from the bench.json in --out; run nothing.'
)
FLAGS = flags.FLAGS


def measure(out, sections, report):
  """The runs of the chosen sections, into `report` (bench.json's content, holding the sections
  of an earlier run that were not chosen again, each with its own provenance); returns it."""
  made = report.setdefault('provenance', {})
  for section in sections:
    made[section] = provenance.record()
  if 'overhead' in sections:
    report['overhead'] = bench_measure.measure_overhead(out)
  if 'comm' in sections:
    report['comm'] = bench_measure.measure_comm(out, FLAGS.comm_rate)
  if 'checkpoint' in sections:
    report['checkpoint'] = bench_measure.measure_checkpoint(out)
  # Sections that reuse an earlier calibration.
  later = {'streamed', 'hetero', 'ranks'} & set(sections)
  if 'overlap' in sections or (later and 'calibration' not in report):
    bench_measure.write_data(os.path.join(out, 'synthetic.npz'))
    print('calibration (S-SGD at two link rates):', flush=True)
    a, b, tp, cal = bench_measure.calibrate(out, FLAGS.probe_rates_mbit)
    print(
      f'  Tc = {a * 1e3:.1f} ms + {b:.0f} ms*kbit/s / rate,  Tp = {tp * 1e3:.1f} ms', flush=True
    )
    report['calibration'] = {'a_s': a, 'b_s_kbit': b, 'Tp_s': tp, 'runs': cal}
  elif later:
    print('calibration: that of the earlier run in bench.json', flush=True)
  if 'overlap' in sections:
    bench_measure.measure_overlap(out, report, FLAGS.ratios, FLAGS.repeats, FLAGS.stagings)
  if 'streamed' in sections:
    bench_measure.measure_streamed(out, report, FLAGS.streamed_ratios, FLAGS.repeats)
  if 'hetero' in sections:
    bench_measure.measure_hetero(out, report, FLAGS.repeats)
  if 'ranks' in sections:
    bench_measure.measure_ranks(out, report, FLAGS.repeats, FLAGS.probe_rates_mbit)
  return report


def main(argv):
  del argv
  out = FLAGS.out
  sections = bench_render.SECTIONS
  unknown = sorted(set(FLAGS.sections) - set(sections))
  if unknown:
    errors.fail(f'bench: --sections has {unknown}; allowed: {list(sections)}', errors.EXIT_USAGE)
  if FLAGS.render_only:
    path = os.path.join(out, 'bench.json')
    if not os.path.exists(path):
      errors.fail(f'bench: --render_only needs {path} from an earlier run', errors.EXIT_USAGE)
    with open(path) as f:
      report = json.load(f)
  else:
    if os.geteuid() != 0:
      errors.fail(
        'bench: the simulated network needs root (network namespaces and tc); run as root'
      )
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, 'bench.json')
    report = {}
    if set(FLAGS.sections) != set(sections) and os.path.exists(path):
      with open(path) as f:  # Some sections measured again; the others kept.
        report = json.load(f)
    report = measure(out, FLAGS.sections, report)
  text = bench_render.render(report)
  print('\n' + text)
  files.write_atomic(os.path.join(out, 'bench.md'), text)
  files.write_json_atomic(os.path.join(out, 'bench.json'), report)


if __name__ == '__main__':
  app.run(main, flags_parser=lambda a: cocod_flags.parse(a, 'bench'))
