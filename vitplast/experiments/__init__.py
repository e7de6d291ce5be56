"""Experiments: runs, their store, the studies and the tables read from them.

``runs`` (a run's keys, checks and hash) · ``store`` (records, companions, the audit) with
``claims`` (a run held while it trains) and ``migrate`` (older record layouts) · ``sweep``
(running what a store lacks) and ``search`` (LRs bracketed on validation) · ``studies`` (the
one registry) with ``study_specs`` · ``study_log`` (sessions, progress) · ``results`` (tidy
tables) with ``lr_selection`` · ``decide`` (the suite study's tables) and ``cross_gauge`` (the
cross-gauge study's checks) · ``confounds`` with ``confound_variants`` and
``confound_plasticity`` (the confound study) · ``archive`` (the shipped stores as one
installable archive).
"""
