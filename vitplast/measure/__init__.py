"""Measuring the paper's objects: components and their plasticity (Definition 1), the bounds
(Propositions 1-4), intervals, and what sets the ranking (the residual stream, its gauge).

``components`` (what a component is) · ``rates`` (one batch's rates) · ``plasticity`` (the
estimator) · ``pairs`` (the image pairs a rate compares) · ``bounds`` (Propositions 1-4) ·
``intervals`` (objection 2, Takeaway 1) · ``definitions`` (notebook 01's direct versions) ·
``empirical`` (measured plasticity of the embedded model, cached) · ``stream`` (the residual
stream's scale and the rankings it sets) · ``gauge`` (the function-preserving rescaling) ·
``relative`` (plasticity in units of a component's own input and output scale) · ``tokens``
(the token scale r, one definition for every notebook) · ``fingerprint`` (which measuring code
made a stored table: the estimator's version and the component table's hash) · ``real`` (the
paper's measurements on a real pretrained ViT, notebook 02c).
"""
