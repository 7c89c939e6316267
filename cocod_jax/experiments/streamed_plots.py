"""The streamed experiment's figures, drawn from its data alone (`streamed_analysis.assemble`, or
streamed.json read back: `python -m cocod_jax.experiments.streamed --replot`): streamed.png
(every variant against S-SGD, a panel per column, 24 epochs filled, 120 epochs hollow) and
streamed_frontier.png (accuracy against speed, a panel per link from the slowest: the overlap
experiment's frontier, `overlap_plots.draw_frontier`)."""

from cocod_jax.experiments import common
from cocod_jax.experiments import figures
from cocod_jax.experiments import overlap_plots
from configs import scales
from configs import streamed as config

STAGES = (('accuracy', '24 epochs', 'C0', -0.15, 'C0'), ('long', '120 epochs', 'none', 0.15, 'C1'))


def draw(data: dict):
  """streamed.png's figure: a panel per column, every variant's difference to S-SGD with its 90%
  interval (24 epochs filled, 120 epochs hollow), the equivalence margin shaded."""
  variants = [v for v in config.ACCURACY if v != config.REFERENCE]
  fig, axes = figures.grid(len(config.TASKS), width=6.5, height=4.6)
  for ax, task in zip(axes, config.TASKS):
    points = []
    for stage, label, fill, dx, color in STAGES:
      rows = data[stage]['rows'].get(task, {})
      style = {'fmt': 'o', 'color': color, 'mfc': fill, 'label': label}
      points += [(x + dx, rows[v]['difference'], rows[v]['lo'], rows[v]['hi'], style)
                 for x, v in enumerate(variants)
                 if (rows.get(v) or {}).get('difference') is not None]  # fmt: skip
    if not points:
      ax.text(0.5, 0.5, 'not run', transform=ax.transAxes, ha='center', color='gray')
      ax.set_yticks([])
    figures.differences(ax, points)
    figures.variant_axis(ax, variants)
    ax.set_title(scales.task_title(task, 'cpu'), fontsize=9)
  figures.legend(fig, axes)
  fig.suptitle(
    f'Streamed CoCoD-SGD (P = {config.FRAGMENTS}) and the whole-model delay against S-SGD '
    '(24 epochs filled, 120 epochs hollow)'
  )
  return fig


def draw_frontier(data: dict):
  """streamed_frontier.png's figure: a panel per link (the slowest first), each timed variant's
  24-epoch accuracy difference to S-SGD against its time-to-target speedup."""
  return overlap_plots.draw_frontier(
    data, 'Streamed CoCoD-SGD beside the whole-model options: accuracy against speed, per link '
    '(slowest first)'
  )  # fmt: skip


def plot(data: dict) -> str:
  """Writes streamed.png into --workdir; its path."""
  return common.save_figure(draw(data), 'streamed')


def plot_frontier(data: dict) -> str:
  """Writes streamed_frontier.png into --workdir; its path."""
  return common.save_figure(draw_frontier(data), 'streamed_frontier')
