"""The stream statistics of notebook 02 as a reader sees them: Prop. 1's plug-in named a
plug-in, never a bound.

``measure.stream.stream_statistics`` stores ``ln1_bound``: max|gamma| / sigma at the MEAN
per-token sigma of LN1's input. Prop. 1's bound needs the sigma of each token (its smallest,
for a bound over them all); at the mean it is the plug-in value, which notebook 03 shows is not
a bound (the valid per-token bound is several times larger). This module renames that column
``ln1_plugin`` and labels its panel so, for the table and the figure notebook 02 shows.

Paper: Prop. 1 (LayerNorm bound). Used by notebook 02 (section 8).
"""

from __future__ import annotations

import pandas as pd

from vitplast.measure import stream

#: The stored column and what a reader sees instead.
STORED, SHOWN = "ln1_bound", "ln1_plugin"
#: The plug-in's name in a figure and its axis label.
PLUGIN = ("LN1 plug-in (not a bound)", "max|gamma| / mean sigma")
#: Each statistic's name in a figure -> its axis label (``plots.lines(..., ylabel=LABELS)``).
LABELS = {PLUGIN[0] if c == STORED else name: PLUGIN[1] if c == STORED else label
          for c, (name, label) in stream.STATISTICS.items()}


def long_statistics(stats: pd.DataFrame) -> pd.DataFrame:
    """``stream.long_statistics`` with the plug-in's panel named a plug-in (``PLUGIN``)."""
    long = stream.long_statistics(stats)
    return long.replace({"statistic": {stream.STATISTICS[STORED][0]: PLUGIN[0]}})


def by_checkpoint(stats: pd.DataFrame) -> pd.DataFrame:
    """``stream.by_checkpoint`` with ``ln1_bound`` shown as ``ln1_plugin``."""
    return shown(stream.by_checkpoint(stats))


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """Any table of stream statistics (e.g. ``train.recipes.recipe_statistics``, notebook 02b)
    with ``ln1_bound`` shown as ``ln1_plugin``."""
    return table.rename(columns={STORED: SHOWN})
