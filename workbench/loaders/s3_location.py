"""Where an S3 dataset lives, declared once for every loader config that reads S3."""

from __future__ import annotations

from pydantic import BaseModel, Field


class S3Location(BaseModel):
    """bucket/prefix overrides of a loader config (defaults: the catalog's, else settings.s3_bucket)."""

    bucket: str | None = Field(None, description="bucket (default: the catalog's, else settings.s3_bucket)")
    prefix: str | None = Field(None, description="key prefix of the dataset (default: the catalog's)")
