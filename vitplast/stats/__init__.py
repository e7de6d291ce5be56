"""Statistics: how a measured value becomes a row with a verdict, below everything that reports.

``verdicts`` (a finding's row: its test, confidence interval, Holm family, verdict words) ·
``primaries`` (the questions a study declares) · ``power`` (how many
independent units a test needs to decide).
"""
