"""Experiments: runs, their store, the studies and the tables read from them.

``runs`` (a run's keys, checks and hash) · ``store`` (records, companions, the audit) with
``claims`` (a run held while it trains) and ``migrate`` (older record layouts) · ``runner``
(a run trained into its record) · ``sweep`` (running what a store lacks) and ``search`` (LRs
bracketed on validation), on a cluster through ``jobs`` (runs packed per job, watched through
the store) with ``job_states`` (how a Slurm job ended, as Slurm and its folder tell it) and,
to try that on one machine, ``local_slurm`` (a one-node Slurm on localhost) · ``runtime`` (a
sweep's settings and which runs it takes) · ``studies`` (the one registry) of the study
kinds, ``kinds`` and ``adaptive``, with their specs' types, ``spec_types``, and values,
``study_specs`` · ``study_log`` (sessions, progress) · ``results`` (one records table per
store) with ``lr_selection`` · ``task_measures`` (plasticity and probes stored per task beside
a searched study's runs) and ``cross_gauge`` (the cross-gauge study's pairs and identity
reruns) · ``confounds`` with ``confound_variants`` and ``confound_plasticity`` (the confound
study) · ``advise`` (which component to finetune: rules ranked per task, kept beside a study)
· ``archive`` (the shipped stores as one installable archive).
"""
