"""Training: the one finetuning loop and what runs on it.

``finetune`` (the loop) over ``configurations`` (what a configuration trains, by name or
parameter pattern), ``passes`` (loader, precision, evaluation), ``trainees`` (what it trains:
one model, or K stacked copies) and ``preflight`` (what a run refuses before any work);
``keys`` (the keys of a run, declared once: defaults, ranges, the run schema);
``batched`` (the LRs of one setting as one computation, on the same loop); ``probes`` (the
linear probe); ``ablations`` (model changes before training); ``pretrain`` (the embedded
model's pretraining) and ``recipes`` (another recipe's ranking); ``invariance`` (finetuning a
gauged network beside the original).
"""
