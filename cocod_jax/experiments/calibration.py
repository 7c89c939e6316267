"""Figure 4's model from calibration runs of its own, never from the runs it is drawn beside.

The Section 4.2 model predicts a time per step from `Tp` and `Tc`. Taken from the very runs it
is plotted against, it predicts them with their own noise and agrees with them by
construction. So the Figure 4 sweep (configs/figure4.py) adds separate S-SGD runs
(`role=calibration`, another seed): S-SGD overlaps nothing, so its spans are clean; `Tp` comes
from the one at 1 worker and `Tc` from the one at the most workers.
"""


def split(points):
  """(measured points, calibration points) of a Figure 4 sweep."""
  calibration = [p for p in points if p.arg.get('role') == 'calibration']
  return [p for p in points if p not in calibration], calibration


def tp_tc(calibration) -> tuple[float, float, int] | None:
  """(Tp at 1 worker, Tc at the most workers, that number of workers) of the finished
  calibration runs; None when either is missing (the model is then not drawn)."""
  runs = {int(p.arg['workers']): p.results for p in calibration if p.results}
  top = max(runs, default=1)
  if 1 not in runs or top == 1 or not runs[1].get('timing') or not runs[top].get('timing'):
    return None
  return runs[1]['timing']['Tp_s'], runs[top]['timing']['Tc_s'], top
