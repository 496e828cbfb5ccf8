"""Checkpoints on remote storage for torch.save / torch.load: S3 (the OSS connector's OssCheckpoint) and Ignite."""
