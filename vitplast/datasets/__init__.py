"""The downstream tasks and their images: the registry and the loaders.

``tasks`` (the registry and ``load``) over ``data`` (embedded images: Fashion-MNIST, digits),
``suite`` (the task suite) with ``drawn`` (its glyphs and pictures), ``corruptions`` (the
shifts), ``paper_datasets`` (the paper's datasets from disk) and ``fake_datasets`` (tiny fakes
of them for tests); ``photos`` (natural images offline: crops of scikit-learn's photographs).
"""
