"""Reporting: findings as rows, their statistics, figures and the interactive views.

``*_findings``, a notebook's findings rows (``definition_findings``, ``plasticity_findings``
for 02 and 02b's suite, ``explorer_findings`` for 06, ``scale_findings`` and
``relative_findings`` for 02b, ``bound_findings``, ``finetuning_findings``,
``confound_findings``, ``suite_findings``, ``cross_gauge_findings`` and ``real_findings`` for
02c), their rows made by ``vitplast.stats`` · the study families' tables
(``finetuning_tables``, ``confound_tables``) · ``sentences`` (a row in plain words, for the
Read cells) · ``synthesis`` (the course's closing questions, answered by rows the notebooks
computed) · ``plots`` (figures as pure functions; the look in ``plot_style``, its colours
checked by ``colour_vision``) · ``widgets`` (notebook 06) with ``explored`` (its measurements
kept) · ``regret`` (the rules of ``vitplast.experiments.advise``, which component to finetune,
scored). The notebooks' runtime (running them, their parameters, the reading copy) is
``vitplast.course``.
"""
