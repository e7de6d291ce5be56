"""Study kinds whose runs adapt to what their store holds: ``ConfoundStudy`` (its runs are made
from its LayerNorm scales, measured once before they are listed) and ``SearchedStudy`` (its
runs are known only as far as its LR search has gone).

Paper: objections 3 and 4 (the confound study); section 2's LR choice, searched instead of
taken from a fixed grid (the suite, cross-gauge and length studies). The kinds' common part,
and the ones whose runs are fixed by their spec: ``vitplast.experiments.kinds``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from vitplast import files
from vitplast.experiments.kinds import GridStudy, Loaded, Study
from vitplast.experiments.runs import run_hash
from vitplast.experiments.runtime import Executor, Runtime
from vitplast.experiments.spec_types import Confound, Search


@dataclass(frozen=True)
class ConfoundStudy(Study):
    """The confound study (a ``spec_types.Confound``): its parts' variants, listed from its
    LayerNorm scales (measured by ``prepare``), compared with its ``baselines`` study's plain
    SGD runs on the same tasks, read from that study's own store (``baselines_root``)."""

    KIND: ClassVar[str] = "confound"
    SPEC: ClassVar[type] = Confound

    def prepare(self, root=None) -> None:
        """Measure its LayerNorm scales into its store, once (``confounds.measure_scales``:
        read when stored): its runs are made from them."""
        from vitplast.experiments import confounds

        confounds.measure_study_scales(self.spec, self._root(root))

    def _runs(self, root, runtime) -> list[dict]:
        from vitplast.experiments import confounds

        return confounds.study_runs(self.spec, root)

    def baseline_study(self) -> GridStudy:
        """What it compares with: its baselines study (a ``GridStudy``) on the tasks of its
        parts only."""
        tasks, spec = {t for part in self.spec.parts for t in part.tasks}, self.baselines.spec
        return replace(self.baselines, definition=replace(
            spec, tasks=tuple(t for t in spec.tasks if t in tasks)), smoke="", budget="")

    def baseline_runs(self, runtime: Runtime = Runtime()) -> list[dict]:
        """The plain SGD runs it compares with: its baselines study's runs on the tasks of its
        parts (``baseline_study``), with ``runtime``'s run keys."""
        return self.baseline_study().runs(None, runtime)

    def baselines_root(self, recompute: bool = False) -> Path:
        """Its baselines' store: their study's own (``Study.root(recompute)``, as ``vitplast
        sweep --study <baselines>`` finds it: the shipped ``data/finetune``, read only; its
        cache copy when recomputing)."""
        return self.baselines.root(recompute)

    def _recompute(self, root: Path, runtime: Runtime) -> None:
        """Run or resume its baselines (``Study.run`` of ``baseline_study``, into
        ``baselines_root``), then itself: its runs are listed from its LayerNorm scales,
        measured by its run."""
        self.baseline_study()._recompute(self.baselines_root(recompute=True), runtime)
        super()._recompute(root, runtime)

    def _load(self, root: Path, runtime: Runtime, recompute: bool) -> Loaded:
        """Its rows and its baselines' (``runs``, settings stored whole), its coverage, and as
        ``extras`` its ``scales``, ``layers``, ``after`` and ``baselines_root``
        (``Loaded``)."""
        import pandas as pd

        from vitplast.experiments import confound_plasticity, confound_variants, confounds, results

        spec, main_root = self.spec, str(self.baselines_root(recompute))
        expected, baselines = self.runs(root, runtime), self.baseline_runs(runtime)
        df = results.records_table(str(root), main_root)
        hashes = {run_hash(c) for c in expected + baselines}
        df = confound_variants.with_variant(df[df["run"].isin(hashes)] if len(df) else df)
        after = [confound_plasticity.plasticity_after(r, root, spec.after.n_pairs,
                                                      compute=recompute)  # df holds the baselines
                 for r in confound_plasticity.after_runs(df, spec, baselines)]
        layer_tasks = [p for p in spec.parts if p.name == "per layer"][0].tasks
        return Loaded(
            confounds.complete_settings(df, expected + baselines),
            results.coverage(df, expected), str(root), extras=dict(
                scales=confounds.study_scales(root, spec.scale_tasks, target=spec.target,
                                              n_pairs=spec.n_pairs),
                layers=confound_plasticity.layer_plasticity(root, layer_tasks, spec.n_pairs),
                after=pd.concat(after, ignore_index=True) if after
                else pd.DataFrame(columns=confound_plasticity.AFTER_COLUMNS),
                baselines_root=main_root))


@dataclass(frozen=True)
class SearchedStudy(Study):
    """A study whose settings' LRs are searched (a ``spec_types.Search``,
    ``vitplast.experiments.search``): its runs are those its search has asked for so far; a
    ``--shard`` takes every n-th setting, each searched to its end in one process."""

    KIND: ClassVar[str] = "searched"
    SPEC: ClassVar[type] = Search

    def _why(self, name: str) -> str:
        return ": its search orders its runs (task by task, an LR at a time)"

    def _runs(self, root, runtime) -> list[dict]:
        from vitplast.experiments import search

        return search.search_runs(self.spec, root, **runtime.run_keys())

    def run(self, root=None, runtime: Runtime = Runtime(),
            executor: Executor = Executor()):
        """Search each setting's LR into its store until bracketed (``search.run_search``),
        copying identical runs of the stores its spec reuses; return the search's
        ``sweep.Outcome``."""
        from vitplast.experiments import search

        self.check(runtime)
        return search.run_search(self.spec, self._root(root), runtime=runtime,
                                 executor=executor,
                                 sources=[files.results_root(s) for s in self.spec.reuse])

    def _load(self, root: Path, runtime: Runtime, recompute: bool) -> Loaded:
        """Its ``runs``: per complete task (every search ended) and configuration, the chosen
        ``lr`` (``search.state``'s ``best``), ``bracketed``, and that run's ``val_acc`` and
        ``test_acc`` (in %) and ``trainable`` count; its settings made with ``runtime``'s run
        keys. With a fixed grid of LRs in its spec, ``extras["grid"]``: the same with each LR
        chosen on validation from that grid (a task is complete when every grid run is
        stored)."""
        extras = {"grid": _chosen(self.spec, root, runtime, grid=True)} if self.spec.grid else {}
        return Loaded(_chosen(self.spec, root, runtime, grid=False), {}, str(root), extras=extras)


def _chosen(spec: Search, root: Path, runtime: Runtime, *, grid: bool):
    """``search.state`` of ``spec`` in ``root`` (``grid``: on its fixed grid), its complete
    tasks only, ``best`` named ``lr``."""
    from vitplast.experiments import search

    state = search.state(spec, root, grid=grid, **runtime.run_keys())
    return state[state["task"].isin(search.complete_tasks(state))].rename(
        columns={"best": "lr"}).reset_index(drop=True)
