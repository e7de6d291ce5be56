"""Studies: the named sets of finetuning runs that the notebooks read and the CLI runs.

Paper: section 5 (the main table, Fig. 18) on the embedded default, and the paper's own grid.
A study is a value of its kind (``vitplast.experiments.kinds``: ``GridStudy``, ``BudgetStudy``,
``PaperStudy``; ``vitplast.experiments.adaptive``: ``ConfoundStudy``, ``SearchedStudy``;
``KINDS``: each by the spec type it takes): its name, a one-line purpose, its results store,
its spec (a value of ``vitplast.experiments.study_specs``, named here and read on first use)
and the study its runs are compared with. ``STUDIES`` is the one registry, looked up by
``get(name)`` (the CLI's ``vitplast sweep --study NAME``, its help and choices; the notebooks'
``study`` parameter); unknown names fail naming the valid ones. Importing it imports no torch.
A study with a ``smoke`` spec has a seconds-long version, ``smoke(study)``, registered as
``<name>-smoke`` (the smoke profile). The LR-tuning diary of each study is prose in its
store's ``README.md``.

- ``main``: notebook 04's main study, stored in ``data/finetune/``.
- ``budget``: the budget-sensitivity check of notebook 04 (every configuration at 4x the
  steps, at its chosen LR of the main study and that LR's two grid neighbours), stored with
  the main study, whose results its runs are made from.
- ``confounds``: notebook 05's confound study.
- ``suite``, ``gauge``, ``length``: the searched-LR studies of notebook 07.
- ``real``, ``real-paper``: the real pretrained ViT (DINOv2 ViT-S/14, fetched) at 56 px on
  a CPU, and at 224 px on a GPU (notebook 02c).
- ``paper``: the paper's own grid (ViT-B/16 in21k, its 11 datasets).

A spec declares its primary questions (``primaries``: at most three ``primaries.Primary``, each
with its direction, the paper's value and its source); the findings tables test them with Holm
over the primaries only, everything else is exploratory.
"""

from __future__ import annotations

from dataclasses import replace

from vitplast.experiments.adaptive import ConfoundStudy, SearchedStudy
from vitplast.experiments.kinds import BudgetStudy, GridStudy, PaperStudy, Study

#: The kinds of study, by the type of spec each takes: the one registry of kinds (a study's
#: spec is refused unless of its kind's type, ``Study.spec``).
KINDS: dict[type, type[Study]] = {kind.SPEC: kind for kind in (
    GridStudy, BudgetStudy, PaperStudy, ConfoundStudy, SearchedStudy)}


def smoke(study: Study) -> Study:
    """The seconds-long version of ``study`` (the smoke profile): its ``smoke`` spec, stored
    in the cache as ``<folder>-smoke``, compared with the smoke version of its baselines."""
    if not study.smoke:
        raise ValueError(f"study {study.name!r} has no smoke version")
    extra = {"budget": ""} if isinstance(study, GridStudy) else {}
    return replace(study, name=f"{study.name}-smoke", folder=f"{study.folder}-smoke",
                   purpose=f"a seconds-long {study.name} study (the smoke profile)",
                   place="cache", definition=study.smoke, smoke="",
                   baselines=smoke(study.baselines) if study.baselines else None, **extra)


def _registry(*full: Study) -> dict[str, Study]:
    """Name -> study: each study, then its smoke version where it has one."""
    return {s.name: s for study in full for s in (study, *([smoke(study)] if study.smoke
                                                           else []))}


def _studies() -> dict[str, Study]:
    """The registry's studies, each built once (the budget check and the confound study
    compare with the main study: the same value)."""
    main = GridStudy("main", "notebook 04's main study", "finetune", "MAIN", smoke="MAIN_SMOKE",
                     budget="BUDGET")
    return _registry(
        main,
        BudgetStudy("budget", "notebook 04's 4x-steps check of the main study, stored with it "
                    "(it reads it)", "finetune", "BUDGET", baselines=main),
        ConfoundStudy("confounds", "notebook 05's confound study", "confounds", "CONFOUNDS",
                      baselines=main, smoke="CONFOUNDS_SMOKE"),
        SearchedStudy("suite", "the decisive study on the 33-task suite, LRs searched", "suite",
                      "SUITE"),
        SearchedStudy("gauge", "the cross-gauge study: 5 configurations at c = 1 and c = 8 on "
                      "17 suite tasks, LRs searched", "gauge", "GAUGE"),
        SearchedStudy("length", "the suite study's recipe-length check: P1 and P2's "
                      "configurations at 2x and 4x the steps on 4 tasks, LRs searched",
                      "suite_length", "LENGTH"),
        SearchedStudy("real", "DINOv2 ViT-S/14 (fetched: vitplast weights get dinov2-small) at "
                      "56 px on 4 tasks, 7 configurations, LRs searched", "real_vit", "REAL"),
        SearchedStudy("real-paper", "the real-model study at 224 px, 8 tasks, 3 seeds (GPU)",
                      "results/real_paper", "REAL_PAPER", place="."),
        PaperStudy("paper", "ViT-B/16 in21k on the 11 paper datasets under --data-root, the "
                   "paper's grid", "results/paper", "PAPER", place="."))


#: Every study by name: the CLI's ``--study`` and the notebooks' ``study``.
STUDIES = _studies()


def get(name: str) -> Study:
    """The study ``name`` of ``STUDIES``; unknown names fail naming the valid ones."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; valid: {list(STUDIES)}")
    return STUDIES[name]

