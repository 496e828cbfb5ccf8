"""Samples, sources, split files and WebDataset shards: the data every backend stores."""

from workbench.data.sample import (
    NAMESPACE,
    Sample,
    checksum,
    decode_multilabel,
    encode_multilabel,
    sample_id,
    verify_image,
)
from workbench.data.shards import (
    ShardInfo,
    check_entries,
    pack_shards,
    read_index,
    read_shard,
    sample_key,
    sample_to_entries,
    write_index,
)
from workbench.data.sources import (
    IMAGE_EXTENSIONS,
    KINDS,
    ImageFolderSource,
    IndexedSource,
    Source,
    SyntheticSource,
    TorchDatasetSource,
    parse_source,
)
from workbench.data.splits import SplitFile, largest_remainder, make_split, parse_ratios

__all__ = [
    "IMAGE_EXTENSIONS",
    "KINDS",
    "NAMESPACE",
    "ImageFolderSource",
    "IndexedSource",
    "Sample",
    "ShardInfo",
    "Source",
    "SplitFile",
    "SyntheticSource",
    "TorchDatasetSource",
    "check_entries",
    "checksum",
    "decode_multilabel",
    "encode_multilabel",
    "largest_remainder",
    "make_split",
    "pack_shards",
    "parse_ratios",
    "parse_source",
    "read_index",
    "read_shard",
    "sample_id",
    "sample_key",
    "sample_to_entries",
    "verify_image",
    "write_index",
]
