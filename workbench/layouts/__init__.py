"""Layouts: how a dataset's samples sit in a `Store`, each one module with its writer and its reader.

`shards` (WebDataset tars + index.json + completion records), `objects` (one object per sample + a
manifest per split + an id journal; also the local ImageFolder copy). `common` holds the checks every
layout applies the same way (split names, labels against label_type).
"""
