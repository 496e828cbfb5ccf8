"""The reference systems' own APIs, built on our loaders (loaders never import this package).

`oss_connector` (OSS Connector for AI/ML: OssMapDataset/OssIterableDataset over oss:// URIs, the same as our
ObjectMapDataset/ObjectIterableDataset over s3://, from_prefix/from_objects/from_manifest_file), `cortx`
(cortx_pytorch: make_client, RemoteDataset), `ignite_dataset` (TensorFlow's IgniteDataset) and `ignite_torch`
(the same elements as a torch dataset). Each module imports its framework (torch, TensorFlow) only where it needs
it, so importing one never pulls in the others.
"""
