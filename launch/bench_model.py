"""The benchmark's algorithms and the time model it measures them against (launch/bench.py).

The overlap section runs ALGOS, the mixed cluster HETERO, the multi-worker ranks RANKS_ALGOS;
each measured time per step stands beside the model of docs/algorithms.md evaluated at the
calibration's Tp and Tc (`calibrated`), never at those of the runs it predicts.
"""

from cocod_jax import timeline

ALGOS = ('ssgd', 'pipe_sgd', 'local_sgd', 'cocod_sgd')
NAMES = dict(ssgd='S-SGD', pipe_sgd='Pipe-SGD', local_sgd='Local-SGD', cocod_sgd='CoCoD-SGD')
K = 5  # configs/bench.py's period.
RANKS_ALGOS = ('ssgd', 'cocod_sgd')
# The heterogeneous case: rank 0 at half speed; (name, algorithm, proportional sampling).
HETERO = (
  ('S-SGD', 'ssgd', False),
  ('S-SGD+PS', 'ssgd', True),
  ('Pipe-SGD+PS', 'pipe_sgd', True),
  ('AsynLocal-SGD', 'asynlocal_sgd', False),
  ('CoCoD-SGD+PS', 'cocod_sgd', True),
)


# Streamed CoCoD-SGD (algorithm.fragments = P): P fragments of the period k, tau = 1 and
# delay='auto', beside the S-SGD run of the same repeat (its Tp and Tc); (name, algorithm, flags).
FRAGMENTS = 5
STREAMED = (
  ('S-SGD', 'ssgd', ()),
  ('streamed tau=1', 'cocod_sgd', (f'--config.algorithm.fragments={FRAGMENTS}',
                                   '--config.algorithm.delay=1')),
  ('streamed delay=auto', 'cocod_sgd', (f'--config.algorithm.fragments={FRAGMENTS}',
                                        '--config.algorithm.delay=auto')),
)  # fmt: skip
STREAMED_RATIOS = ('1', '3', '6')  # r ~ 6: one step no longer covers a fragment of Tc / 5.
STREAMED_TARGET = 1.10  # A streamed round / max(k Tp, Tc), tau = 1, at r = 1 and r = 3.


def predicted_step(algorithm, tp, tc, k=K):
  """Section 4.2's time per step for measured Tp and Tc (docs/algorithms.md, the time model)."""
  return timeline.model_step_time(algorithm, tp, tc, k)


def predicted_streamed(algorithm, tp, tc, tau, k=K):
  """The time model of a `STREAMED` variant: S-SGD's, or CoCoD-SGD's with FRAGMENTS fragments and
  the tau the run used (docs/algorithms.md)."""
  if algorithm != 'cocod_sgd':
    return predicted_step(algorithm, tp, tc, k)
  return timeline.model_step_time(algorithm, tp, tc, k, tau, FRAGMENTS)


def predicted_hetero(algorithm, tp_slow, tc, k=K):
  """Time per global step of a mixed cluster (docs/algorithms.md): the slowest worker's step without
  balance; balanced (PS, AsynLocal-SGD) the homogeneous model with the balanced step, which on
  this cluster is the slow rank's: `tp_slow` either way."""
  return predicted_step(algorithm, tp_slow, tc, k)


def calibrated(calibration, rate_kbit):
  """(Tp, Tc) that the calibration runs predict at `rate_kbit`: their mean Tp, and the fit
  Tc = a + b / rate. The time model takes these, never the Tp and Tc of the runs it predicts."""
  return calibration['Tp_s'], calibration['a_s'] + calibration['b_s_kbit'] / rate_kbit


def summarize(runs_by_algo, rate_kbit, target, calibration):
  """Rows of one ratio: medians and [min, max] over the repeats; the model from `calibration`."""
  ssgd = runs_by_algo['ssgd']
  tp, tc = calibrated(calibration, rate_kbit)
  rows = []
  for algo in ALGOS:
    runs = runs_by_algo[algo]
    steps = [r['step_time_s'] for r in runs]
    speedups = [s['step_time_s'] / r['step_time_s'] for s, r in zip(ssgd, runs)]
    pred = [predicted_step(algo, tp, tc)] * len(runs)
    rows.append(
      {
        'target_r': target,
        'rate_mbit': rate_kbit / 1000,
        'algorithm': algo,
        'r_measured': [s['Tc_s'] / s['Tp_s'] for s in ssgd],
        'step_time_s': steps,
        'speedup_vs_ssgd': speedups,
        'predicted_step_s': pred,
        'hidden_fraction': [r['hidden_fraction'] for r in runs],
        'round_time_s': [r['round_time_s'] for r in runs],
        'round_vs_ideal': [
          r['round_time_s'] / max(K * s['Tp_s'], s['Tc_s']) if r['round_time_s'] else None
          for s, r in zip(ssgd, runs)
        ],
      }
    )
  return rows
