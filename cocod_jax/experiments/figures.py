"""What the overlap and corrections figures share: panels on a grid, links in the order of their
rates, and an axis of accuracy differences to S-SGD whose range the bulk of the points sets, an
outlier drawn at its edge as a triangle with its true value written beside it (a -72-point run
would otherwise squeeze every other point into one pixel row)."""

import math
import re
import statistics

from cocod_jax.experiments import accuracy
from cocod_jax.experiments import common

# A point is an outlier when further from the panel's median than SPREAD times the bulk's spread
# (the median absolute deviation, at least the equivalence margin): 4 points at the least.
SPREAD = 8
DIFFERENCE_LABEL = 'final accuracy - S-SGD (points), 90% interval'
_PREFIX = {'': 1.0, 'k': 1e3, 'm': 1e6, 'g': 1e9}


def link_rate(link: str) -> float:
  """Bits per second of a link RATE[/BURST[/MTU]] in tc units ('5.5mbit/8kb/8000': 5.5e6); inf
  where it names no rate (such a link sorts last)."""
  m = re.match(r'([0-9.]+)([kmg]?)bit', link)
  return float(m.group(1)) * _PREFIX[m.group(2)] if m else math.inf


def by_rate(links) -> list:
  """`links` from the slowest to the fastest."""
  return sorted(links, key=link_rate)


def grid(panels: int, width: float = 6.0, height: float = 4.4, cols: int = 2):
  """A figure of `panels` panels, `cols` to a row (fewer panels: one row); (fig, [axes])."""
  plt = common._pyplot()  # pylint: disable=protected-access
  cols = max(1, min(cols, panels))
  rows = math.ceil(panels / cols)
  fig, axes = plt.subplots(
    rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout='constrained'
  )
  axes = list(axes.ravel())
  for ax in axes[panels:]:
    fig.delaxes(ax)
  return fig, axes[:panels]


def bulk(values, floor: float = accuracy.MARGIN) -> tuple[float, float]:
  """(low, high): the values within SPREAD x max(median absolute deviation, `floor`) of the
  median are the bulk; those outside, the outliers."""
  med = statistics.median(values)
  reach = SPREAD * max(statistics.median(abs(v - med) for v in values), floor)
  return med - reach, med + reach


def differences(ax, points) -> tuple[float, float] | None:
  """Draws `points`, [(x, y, lo, hi, style)] (lo, hi: the 90% interval or None; style: the
  errorbar's fmt, color, mfc and label), on `ax` with the equivalence margin shaded and the y
  range of the bulk's intervals (`bulk`); an outlier is a triangle at the edge it lies beyond,
  its value written beside it. The y limits; None without points."""
  if not points:
    return None
  # An interval of one pair is infinite: drawn as none.
  points = [(x, y, lo, hi, style) if _finite(lo, hi) else (x, y, None, None, style)
            for x, y, lo, hi, style in points]  # fmt: skip
  low, high = bulk([p[1] for p in points])
  inside = [p for p in points if low <= p[1] <= high]
  ends = [e for x, y, lo, hi, _ in inside for e in (y, lo, hi) if e is not None]
  ymin, ymax = min(ends + [-accuracy.MARGIN]), max(ends + [accuracy.MARGIN])
  span = ymax - ymin
  below = any(p[1] < low for p in points)
  above = any(p[1] > high for p in points)
  ymin -= span * (0.16 if below else 0.05)
  ymax += span * (0.16 if above else 0.05)
  labelled = set()
  for x, y, lo, hi, style in points:
    style = dict(style)
    if style.get('label') in labelled:  # One legend entry a label.
      del style['label']
    elif 'label' in style:
      labelled.add(style['label'])
    if low <= y <= high:
      err = None if lo is None else [[y - lo], [hi - y]]
      ax.errorbar(x, y, yerr=err, capsize=3, **style)
      continue
    edge = ymin + 0.03 * (ymax - ymin) if y < low else ymax - 0.03 * (ymax - ymin)
    ax.plot(x, edge, 'v' if y < low else '^', color=style['color'], mfc=style.get('mfc'),
            label=style.get('label'), clip_on=False)  # fmt: skip
    ax.annotate(f'{y:+.1f}', (x, edge), xytext=(0, 6 if y < low else -6),
                textcoords='offset points', ha='center', va='bottom' if y < low else 'top',
                fontsize=7, color=style['color'])  # fmt: skip
  if below or above:
    ax.plot([], [], 'v' if below else '^', color='gray', label='beyond the axis (value written)')
  ax.set_ylim(ymin, ymax)
  ax.axhspan(-accuracy.MARGIN, accuracy.MARGIN, color='green', alpha=0.1)
  ax.axhline(0, color='gray', lw=0.8)
  ax.set_ylabel(DIFFERENCE_LABEL, fontsize=8)
  ax.grid(alpha=0.3)
  return ymin, ymax


def _finite(*values) -> bool:
  return all(v is not None and math.isfinite(v) for v in values)


def variant_axis(ax, variants):
  """The x axis of a panel with one column of points per variant, its names slanted."""
  ax.set_xticks(list(range(len(variants))), variants, rotation=40, ha='right', fontsize=7)
  ax.set_xlim(-0.6, len(variants) - 0.4)


def legend(fig, axes, cols: int = 4):
  """One legend below the panels: every label of `axes`, once."""
  seen = {}
  for ax in axes:
    for handle, label in zip(*ax.get_legend_handles_labels()):
      seen.setdefault(label, handle)
  if seen:
    fig.legend(list(seen.values()), list(seen), loc='outside lower center', ncols=cols, fontsize=8)
