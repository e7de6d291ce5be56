"""vitplast: a study kit for "Vision Transformer Finetuning Benefits from Non-Smooth Components".

Glossary: one word per thing, in the paper's words where it has one.

==============  ===================================================================(``vitplast/checkpoints/``) and the notebooks (``vitplast/notebooks/``).
"""

__version__ = "0.1.0"

#: The public modules. Importing ``vitplast`` loads none of them: import the one you need,
#: e.g. ``from vitplast import tasks``.
__all__ = ["ablations", "bounds", "components", "confounds", "corruptions", "data",
           "definitions", "empirical", "fake_datasets", "findings", "finetune", "inputs",
           "intervals", "models", "notebooks", "pairs", "paper", "paper_datasets", "plasticity",
           "plots", "pretrain", "provenance", "results", "runs", "store", "studies", "sweep",
           "tasks", "widgets"]
