"""The course's closing synthesis: what it found against the paper, one question at a time,
each answer a findings row already computed by its notebook, so every sentence carries its
number (notebook 07, its last section).

The questions, in order (``QUESTIONS``): is the measured ranking the paper's, and what moves it
(this model's token scale against ViT-B's, the embedding scales at which the paper's order
appears, and the order under the residual-stream gauge: notebooks 02 and 02b); does attention
beat the LayerNorms at a matched count (07's P1) and at full counts (P2); what predicts a
component's gain, its plasticity under either protocol (07's P3) or its trainable count; and
what real pretrained weights say (notebook 02c: the order against Fig. 2 and Takeaway 2's
threshold under both protocols, the token scale, and, once a task of the real-model study is
complete, its MHA - LN1 primary: ``OPTIONAL``).

Paper: Takeaways 2 and 3, Table 1, Fig. 2.
"""

from __future__ import annotations

import pandas as pd

from vitplast.report import scale_findings, sentences

#: Stands in ``QUESTIONS`` for the gauge's order rows at the least and largest gauge c that
#: notebook 02b measured (``closing``'s ``gauge_cs``; ``scale_findings.gauge_order_claims``).
GAUGE_ORDERS = "the order at the least and largest gauge c, under each protocol"

#: Each question of the synthesis -> the claims (``sentences.select``: exact, or the one claim
#: containing it) of the rows that answer it, in order.
QUESTIONS = {
    "Is the measured ranking the paper's, and what moves it? The token scale, and the gauge": (
        "token scale r", "embedding scales s at which the paper's order appears", GAUGE_ORDERS),
    "Does attention beat the LayerNorms once counts are matched (P1), and at full counts (P2)?": (
        "(MHA, FC1, FC2 sparse) - LayerNorms", "MHA - LN1 at full counts"),
    "What predicts a component's gain: its plasticity (P3, both protocols) or its count?": (
        "five components, within a task (plasticity: embedding protocol",
        "five components, within a task (plasticity: hidden protocol",
        "Spearman(trainable count, gain over head-only)"),
    "What do real pretrained weights (DINOv2 ViT-S/14's architecture, notebook 02c) say?": (
        "blocks [photos, embedding]", "blocks [photos, hidden]",
        "side of 1 (MHA, FC1, FC2 above; LN2, LN1 below) [photos, embedding]",
        "side of 1 (MHA, FC1, FC2 above; LN2, LN1 below) [photos, hidden]",
        "RMS token norm of the embedding) [photos]",
        "MHA - LN1 on the real model"),
}
#: Claims read only when a table holds them: the real-model study's primary, which exists once
#: a task of that study is complete.
OPTIONAL = ("MHA - LN1 on the real model",)


def _holds(table: pd.DataFrame, claim: str) -> bool:
    """Whether ``table`` holds ``claim`` as ``sentences.select`` finds it (exactly, or in one
    claim); a claim matching several rows of a table fails there (``select``), never falling
    through to the next table."""
    return claim in set(table["claim"]) or table["claim"].str.contains(claim, regex=False).any()


def claims(*, gauge_cs) -> dict[str, list[str]]:
    """``QUESTIONS`` with ``GAUGE_ORDERS`` written out for the gauge c of ``gauge_cs``."""
    gauge = scale_findings.gauge_order_claims(gauge_cs)
    return {q: [c for claim in asked for c in (gauge if claim == GAUGE_ORDERS else [claim])]
            for q, asked in QUESTIONS.items()}


def closing(*tables: pd.DataFrame, gauge_cs) -> pd.DataFrame:
    """The rows answering ``QUESTIONS``, found in ``tables`` (findings tables; the first that
    holds a claim answers it), with a ``question`` column, in the questions' order; the gauge's
    rows at the least and largest of ``gauge_cs`` (02b's ``gauge_cs``).

    Raises:
        ValueError: a claim no table holds, naming the question and the claims there are; a
            claim that matches several rows of the first table holding it (``select``).
    """
    parts = []
    for question, asked in claims(gauge_cs=gauge_cs).items():
        for claim in asked:
            for t in tables:
                if _holds(t, claim):
                    parts.append(sentences.select(t, claim).assign(question=question))
                    break
            else:
                if claim in OPTIONAL:
                    continue
                held = [c for t in tables for c in t["claim"]]
                raise ValueError(f"{question!r}: no table holds the claim {claim!r}; "
                                 f"claims there: {held}")
    return pd.concat(parts, ignore_index=True)


def read(found: pd.DataFrame):
    """The synthesis as Markdown: each question in bold, then its rows' sentences."""
    from IPython.display import Markdown

    lines = []
    for question, rows in found.groupby("question", sort=False):
        lines += [f"**{question}**", "", *(f"- {sentences.sentence(r)}"
                                           for _, r in rows.iterrows()), ""]
    return Markdown("\n".join(lines).rstrip())


__all__ = ["GAUGE_ORDERS", "QUESTIONS", "claims", "closing", "read"]
