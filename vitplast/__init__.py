"""vitplast: a study kit for "Vision Transformer Finetuning Benefits from Non-Smooth Components".

Modules, one concept of the paper each: ``components`` (LN1, MHA, LN2, FC1, FC2), ``plasticity``
and ``pairs`` (Definition 1), ``bounds`` (Propositions 1-4), ``intervals`` (objection 2,
Takeaway 1), ``finetune`` (the training loop), ``sweep`` and ``store`` (grids and results),
``ablations`` (confounds), ``data`` and ``corruptions`` (tasks), ``paper_datasets`` (the paper's
datasets from disk; ``fake_datasets`` writes tiny fakes of them), ``models`` (loading),
``plots``, ``widgets``, ``notebooks``. Package data: the embedded checkpoints
(``vitplast/checkpoints/``) and the notebooks (``vitplast/notebooks/``).
"""

__version__ = "0.1.0"
