"""The course: running the notebook sequence, apart from what the notebooks report.

``notebooks`` (papermill runs of the sequence in a profile: smoke, default, paper; their kernels
in ``kernels``) with ``parameters`` (a notebook's parameters checked where it runs, the shipped
stores it reads, and where it keeps its measurements: ``kept_folder``), ``reading_copy`` (an
executed run as static HTML) and ``run_diff`` (what two executed runs printed, compared cell by
cell). The findings, tables and figures the notebooks show live in ``vitplast.report``.
"""
