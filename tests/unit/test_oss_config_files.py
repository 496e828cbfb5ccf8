"""The OSS connector's credential and config files: parsing, one-line errors, no secret in any output."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.errors import WorkbenchError
from workbench.storage.oss_access import attach_log_file
from workbench.storage.oss_config import (
    OssConfig,
    load_config,
    load_credentials,
    parse_config,
    parse_credentials,
)

SECRET = "pssst-7Hk2-very-secret"
TOKEN = "tok-9Qz-also-secret"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=20), children, max_size=4),
    max_leaves=20,
)
credential_like = st.fixed_dictionaries(
    {}, optional={"AccessKeyId": json_values, "AccessKeySecret": st.just(SECRET) | json_values,
                  "SecurityToken": st.just(TOKEN) | json_values,
                  "Expiration": st.datetimes().map(lambda d: d.isoformat()) | json_values})
config_like = st.fixed_dictionaries(
    {}, optional={"logLevel": json_values | st.integers(-1, 4), "logPath": json_values, "auditPath": json_values,
                  "datasetConfig": st.fixed_dictionaries({}, optional={"prefetchConcurrency": json_values,
                                                                       "prefetchWorker": json_values}) | json_values,
                  "checkpointConfig": st.dictionaries(st.sampled_from(["prefetchConcurrency", "prefetchWorker",
                                                                       "uploadConcurrency", "x"]),
                                                      st.integers(-2, 2000) | json_values) | json_values,
                  "extra": json_values})


def _ends_well(parse, data) -> None:
    """A result, or one WorkbenchError line without the secret: nothing else."""
    try:
        result = parse(data)
    except WorkbenchError as exc:
        text = str(exc)
        assert "\n" not in text and SECRET not in text and TOKEN not in text
        return
    assert SECRET not in repr(result) and TOKEN not in repr(result)


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, credential_like))
def test_any_json_credential_file_is_a_result_or_one_error(value):
    _ends_well(lambda d: parse_credentials(d, "cred.json"), json.dumps(value))


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, config_like))
def test_any_json_config_file_is_a_result_or_one_error(value):
    _ends_well(lambda d: parse_config(d, "config.json"), json.dumps(value))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_a_result_or_one_error(data):
    _ends_well(parse_credentials, data)
    _ends_well(parse_config, data)


def test_deep_nesting_is_one_error():
    with pytest.raises(WorkbenchError, match="not valid JSON"):
        parse_config("[" * 100_000)


def test_credentials_parsed_and_secret_hidden():
    creds = parse_credentials(json.dumps({"AccessKeyId": "ak", "AccessKeySecret": SECRET, "SecurityToken": TOKEN,
                                          "Expiration": "2099-08-02T15:04:05Z", "Other": 1}))
    assert creds.access_key_id == "ak"
    assert creds.access_key_secret.get_secret_value() == SECRET
    assert creds.security_token.get_secret_value() == TOKEN
    assert creds.expiration == datetime(2099, 8, 2, 15, 4, 5, tzinfo=UTC)
    assert SECRET not in repr(creds) and SECRET not in str(creds) and TOKEN not in repr(creds)


def test_expiry_without_zone_is_utc_and_expired_names_file_and_time(tmp_path):
    path = tmp_path / "credentials"
    path.write_text(json.dumps({"AccessKeyId": "ak", "AccessKeySecret": SECRET, "Expiration": "2024-08-02T15:04:05"}))
    with pytest.raises(WorkbenchError, match=rf"{path} expired at 2024-08-02T15:04:05\+00:00") as info:
        load_credentials(path)
    assert SECRET not in str(info.value)
    past = datetime(2024, 8, 2, 15, 4, 4, tzinfo=UTC)
    assert load_credentials(path, now=past).expiration - past == timedelta(seconds=1)


@pytest.mark.parametrize(("doc", "message"), [
    ({"AccessKeyId": "ak"}, "has no field 'AccessKeySecret'"),
    ({"AccessKeySecret": SECRET}, "has no field 'AccessKeyId'"),
    ({"AccessKeyId": "ak", "AccessKeySecret": ""}, "field 'AccessKeySecret': Value error, must not be empty"),
    ({"AccessKeyId": "ak", "AccessKeySecret": SECRET, "Expiration": "soon"}, "field 'Expiration'"),
    ({"AccessKeyId": 5, "AccessKeySecret": SECRET}, "field 'AccessKeyId': Input should be a valid string"),
    ([SECRET], "input should be an object"),
])
def test_malformed_credentials_name_file_and_field(tmp_path, doc, message):
    path = tmp_path / "cred.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(WorkbenchError, match=message) as info:
        load_credentials(path)
    assert str(path) in str(info.value) and SECRET not in str(info.value)


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(WorkbenchError, match=r"credential file .*nope does not exist: .*cred_path"):
        load_credentials(tmp_path / "nope")
    with pytest.raises(WorkbenchError, match=r"cannot read OSS config file .*: .*config_path"):
        load_config(tmp_path)  # a directory
    (tmp_path / "big").write_bytes(b" " * (2 << 20))
    with pytest.raises(WorkbenchError, match="is over"):
        load_config(tmp_path / "big")


def test_config_defaults_as_documented():
    config = parse_config("{}")
    assert (config.log_level, config.log_path, config.audit_path) == (1, None, None)
    assert (config.dataset.prefetch_concurrency, config.dataset.prefetch_worker) == (24, 2)
    assert (config.checkpoint.prefetch_concurrency, config.checkpoint.prefetch_worker,
            config.checkpoint.upload_concurrency) == (24, 4, 64)
    assert config.logging_level == logging.INFO


def test_config_values():
    config = parse_config(json.dumps({"logLevel": 0, "logPath": "/x/c.log", "auditPath": "/x/a.log",
                                      "datasetConfig": {"prefetchConcurrency": 3},
                                      "checkpointConfig": {"uploadConcurrency": 5, "prefetchWorker": 1}}))
    assert config.logging_level == logging.DEBUG
    assert (config.log_path, config.audit_path) == ("/x/c.log", "/x/a.log")
    assert (config.dataset.prefetch_concurrency, config.dataset.prefetch_worker) == (3, 2)
    assert (config.checkpoint.upload_concurrency, config.checkpoint.prefetch_worker) == (5, 1)


@pytest.mark.parametrize(("doc", "message"), [
    ({"loglevel": 1}, r"unknown key 'loglevel': valid keys are logLevel, logPath, auditPath, datasetConfig, "
                      r"checkpointConfig$"),
    ({"datasetConfig": {"uploadConcurrency": 1}},
     r"unknown key 'uploadConcurrency' in datasetConfig: valid keys are prefetchConcurrency, prefetchWorker$"),
    ({"checkpointConfig": {"prefetchConcurrency": 0}}, "'checkpointConfig.prefetchConcurrency': .*greater than"),
    ({"logLevel": 4}, "'logLevel': Input should be less than or equal to 3"),
    ({"logLevel": "1"}, "'logLevel': Input should be a valid integer"),
    ({"datasetConfig": {"prefetchConcurrency": 2.5}}, "'datasetConfig.prefetchConcurrency'"),
    ({"logPath": ""}, "'logPath'"),
])
def test_bad_config_is_one_line_naming_the_key(doc, message):
    with pytest.raises(WorkbenchError, match=message) as info:
        parse_config(json.dumps(doc), "conf.json")
    assert str(info.value).startswith("OSS config file conf.json")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(level=st.integers(0, 3))
def test_log_file_gets_records_at_its_level_and_above(tmp_path, level):
    path = tmp_path / f"logs-{level}" / "connector.log"
    logger = logging.getLogger(f"workbench.test.oss.{level}.{path.parent.name}")
    config = OssConfig.model_validate({"logLevel": level, "logPath": str(path)})
    attach_log_file(logger, config)
    attach_log_file(logger, config)  # idempotent
    for n, emit in enumerate((logger.debug, logger.info, logger.warning, logger.error)):
        emit("message %d", n)
    lines = path.read_text().splitlines()
    assert [line.rsplit(" ", 1)[-1] for line in lines] == [str(n) for n in range(level, 4)]
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    path.unlink()
