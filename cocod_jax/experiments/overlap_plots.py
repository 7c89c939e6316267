"""The overlap experiment's figures, drawn from its data alone (`overlap_analysis.assemble`, or
overlap.json read back: `python -m cocod_jax.experiments.overlap --replot`): overlap.png (every
variant against S-SGD, a panel per column) and overlap_frontier.png (accuracy against speed, a
panel per link from the slowest). Each on a grid of two columns, its accuracy axis set by the
bulk of its points, an outlier at the edge with its value (`figures.differences`)."""

from cocod_jax.experiments import common
from cocod_jax.experiments import figures
from cocod_jax.experiments import overlap_analysis as analysis
from configs import overlap as config
from configs import scales

STAGES = (('pilot', 'none', -0.15, 'C1'), ('full', 'C0', 0.15, 'C0'))  # Fill, x offset, colour.


def draw(data: dict):
  """overlap.png's figure: a panel per column, every variant's difference to S-SGD with its 90%
  interval (pilot hollow, full runs filled), the equivalence margin shaded."""
  variants = [v for v in config.VARIANTS if v != config.REFERENCE]
  fig, axes = figures.grid(len(config.TASKS), width=6.5, height=4.6)
  for ax, task in zip(axes, config.TASKS):
    points = []
    for stage, fill, dx, color in STAGES:
      rows = data[stage]['rows'].get(task, {})
      style = {'fmt': 'o', 'color': color, 'mfc': fill, 'label': f'{stage} runs'}
      points += [(x + dx, rows[v]['difference'], rows[v]['lo'], rows[v]['hi'], style)
                 for x, v in enumerate(variants)
                 if (rows.get(v) or {}).get('difference') is not None]  # fmt: skip
    figures.differences(ax, points)
    figures.variant_axis(ax, variants)
    ax.set_title(scales.task_title(task, 'cpu'), fontsize=9)
  figures.legend(fig, axes)
  fig.suptitle("CoCoD-SGD's overlap options against S-SGD (pilot hollow, full runs filled)")
  return fig


def draw_frontier(
  data: dict, title: str = "CoCoD-SGD's overlap options: accuracy against speed, per link "
  '(slowest first)',
):  # fmt: skip
  """overlap_frontier.png's figure: a panel per link (the slowest first) and timed column, each
  timed variant's accuracy difference to S-SGD (90% interval) against its time-to-target
  speedup (hollow: the epoch speedup, a seed missed the target), the Pareto front joined."""
  parts = [(link, task, data['timing'][link][task]) for link in figures.by_rate(data['timing'])
           for task in data['timing'][link]]  # fmt: skip
  fig, axes = figures.grid(len(parts), width=6.5, height=4.8)
  for ax, (link, task, part) in zip(axes, parts):
    points, front = [], []
    for i, r in enumerate(part['rows']):
      x, reached = analysis.frontier_x(r)
      acc = r['accuracy']
      if x is None or acc.get('difference') is None:
        continue
      style = {'fmt': 'o' if acc.get('lo') is not None else 's', 'color': f'C{i}',
               'mfc': f'C{i}' if reached else 'none', 'label': r['variant']}  # fmt: skip
      points.append((x, acc['difference'], acc.get('lo'), acc.get('hi'), style))
      if r['variant'] in part['pareto']:
        front.append((x, acc['difference']))
    ymin, ymax = figures.differences(ax, points) or (None, None)
    if front:
      front.sort()
      ax.plot([x for x, _ in front], [min(max(y, ymin), ymax) for _, y in front], color='black',
              lw=0.8, ls='--', label='Pareto front')  # fmt: skip
    r_link = part['check']['r']
    r_text = '-' if r_link is None else f'{r_link:.2f}'
    ax.set_title(f'{link} (S-SGD r = {r_text}), {scales.task_title(task, "cpu")}', fontsize=9)
    ax.set_xlabel('speedup over S-SGD to the target (hollow: epoch speedup, target missed)')
  figures.legend(fig, axes)
  fig.suptitle(title)
  return fig


def plot(data: dict) -> str:
  """Writes overlap.png into --workdir; its path."""
  return common.save_figure(draw(data), 'overlap')


def plot_frontier(data: dict) -> str:
  """Writes overlap_frontier.png into --workdir; its path."""
  return common.save_figure(draw_frontier(data), 'overlap_frontier')
