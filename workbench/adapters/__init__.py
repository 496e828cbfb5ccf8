"""Adapters turn any registered loader into a PyTorch dataset, a tf.data pipeline or a DALI pipeline.

They know nothing of a backend's wire protocol; loaders know nothing of frameworks.
"""
