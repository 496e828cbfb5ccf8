"""Reference training pipelines fed by the workbench loaders (PyTorch, DALI, Lightning, Keras).

Each one trains a real model for a few steps from a remote backend and reports images/s next to the
same model's no-I/O ceiling (synthetic in-memory tensors): the ratio says how well storage and
decoding keep the model fed. See pipelines/README.md.
"""
