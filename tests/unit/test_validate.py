"""Argument checks (pgqueue.validate): each accepts what the API documents and refuses the
rest with ValueError or TypeError naming the argument. No database."""
from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import pytest

from pgqueue import validate
from pgqueue.client import newjobs
from pgqueue.models import NewJob

UTC = dt.timezone.utc


# -- stream -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "default", "x" * 200, "ünï côde", "with space"])
def test_stream_accepts_1_to_200_characters(name: str) -> None:
    assert validate.stream(name) == name


@pytest.mark.parametrize("name", ["", "x" * 201])
def test_stream_refuses_empty_and_too_long(name: str) -> None:
    with pytest.raises(ValueError, match="stream"):
        validate.stream(name)


@pytest.mark.parametrize("name", [None, 5, b"bytes"])
def test_stream_must_be_a_str(name: Any) -> None:
    with pytest.raises(TypeError, match="stream"):
        validate.stream(name)


def test_stream_counts_characters_not_bytes() -> None:
    assert validate.stream("é" * 200) == "é" * 200


def test_stream_names_the_given_argument() -> None:
    with pytest.raises(ValueError, match="target_stream"):
        validate.stream("", "target_stream")


# -- integer ------------------------------------------------------------------------------------


def test_integer_within_bounds() -> None:
    assert validate.integer(0, "priority", low=0, high=255) == 0
    assert validate.integer(255, "priority", low=0, high=255) == 255
    assert validate.integer(-(2**40), "n") == -(2**40)
    assert validate.integer(10**12, "n", low=1) == 10**12


@pytest.mark.parametrize("value", [-1, 256])
def test_integer_out_of_bounds(value: int) -> None:
    with pytest.raises(ValueError, match="priority") as caught:
        validate.integer(value, "priority", low=0, high=255)
    assert str(value) in str(caught.value)


def test_integer_low_bound_only() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        validate.integer(-1, "max_attempts", low=0)


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, 1 + 0j])
def test_integer_refuses_non_ints_and_bools(value: Any) -> None:
    with pytest.raises(TypeError, match="limit"):
        validate.integer(value, "limit", low=1)


# -- seconds and to_ms --------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (0, 0.0), (1, 1.0), (0.25, 0.25), (dt.timedelta(minutes=2), 120.0),
    (dt.timedelta(0), 0.0),
])
def test_seconds_accepts_numbers_and_timedeltas(value: Any, expected: float) -> None:
    got = validate.seconds(value, "delay")
    assert got == expected
    assert isinstance(got, float)


@pytest.mark.parametrize("value", [-1, -0.001, dt.timedelta(seconds=-1), math.nan, math.inf,
                                   -math.inf])
def test_seconds_refuses_negative_and_non_finite(value: Any) -> None:
    with pytest.raises(ValueError, match="delay"):
        validate.seconds(value, "delay")


@pytest.mark.parametrize("value", [0, 0.0, dt.timedelta(0), -2])
def test_seconds_positive_refuses_zero_and_below(value: Any) -> None:
    with pytest.raises(ValueError, match="visibility_timeout"):
        validate.seconds(value, "visibility_timeout", positive=True)


def test_seconds_positive_accepts_a_tiny_value() -> None:
    assert validate.seconds(1e-6, "visibility_timeout", positive=True) == 1e-6


@pytest.mark.parametrize("value", ["5", None, True, [1]])
def test_seconds_refuses_other_types(value: Any) -> None:
    with pytest.raises(TypeError, match="retry_in"):
        validate.seconds(value, "retry_in")


@pytest.mark.parametrize(("value", "expected"), [
    (0, 0), (1, 1000), (2.5, 2500), (0.0001, 1), (1.0001, 1001), (dt.timedelta(hours=1), 3_600_000),
    (dt.timedelta(milliseconds=1), 1),
])
def test_to_ms_rounds_up(value: Any, expected: int) -> None:
    assert validate.to_ms(value, "delay") == expected


def test_to_ms_never_turns_a_positive_value_into_zero() -> None:
    assert validate.to_ms(1e-9, "visibility_timeout", positive=True) == 1


def test_to_ms_refuses_what_seconds_refuses() -> None:
    with pytest.raises(ValueError, match="delay"):
        validate.to_ms(-1, "delay")
    with pytest.raises(ValueError, match="visibility_timeout"):
        validate.to_ms(0, "visibility_timeout", positive=True)


# -- aware_datetime -----------------------------------------------------------------------------


def test_aware_datetime_accepts_any_timezone() -> None:
    when = dt.datetime(2030, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    assert validate.aware_datetime(when, "not_before") is when


def test_aware_datetime_refuses_naive() -> None:
    with pytest.raises(ValueError, match="not_before"):
        validate.aware_datetime(dt.datetime(2030, 1, 1), "not_before")


@pytest.mark.parametrize("value", [dt.date(2030, 1, 1), "2030-01-01T00:00:00Z", 0])
def test_aware_datetime_refuses_non_datetimes(value: Any) -> None:
    with pytest.raises(TypeError, match="not_before"):
        validate.aware_datetime(value, "not_before")


# -- payload ------------------------------------------------------------------------------------


def test_payload_bytes_as_is() -> None:
    raw = bytes(range(256))
    assert validate.payload(raw) is raw
    assert validate.payload(b"") == b""


def test_payload_bytes_like() -> None:
    assert validate.payload(bytearray(b"\x00\x01")) == b"\x00\x01"
    assert validate.payload(memoryview(b"abc")) == b"abc"
    assert type(validate.payload(bytearray(b"x"))) is bytes


def test_payload_str_as_utf8() -> None:
    assert validate.payload("héllo ✓") == "héllo ✓".encode()
    assert validate.payload("") == b""


@pytest.mark.parametrize("value", [{"a": 1, "b": [1, 2.5, None, True]}, [1, "x"], [], {}, 5,
                                   None, "not json-encoded: a str stays a str"])
def test_payload_json_values_as_json_text(value: Any) -> None:
    got = validate.payload(value)
    if isinstance(value, str):
        assert got == value.encode()
    else:
        assert json.loads(got.decode("utf-8")) == value


def test_payload_json_is_utf8() -> None:
    got = validate.payload({"name": "Zoë"})
    assert json.loads(got.decode("utf-8")) == {"name": "Zoë"}


@pytest.mark.parametrize("value", [object(), {1, 2}, frozenset(), {"x": object()}, [math.nan],
                                   {"f": math.inf}, {(1, 2): "tuple key"}])
def test_payload_refuses_what_json_cannot_carry(value: Any) -> None:
    with pytest.raises(TypeError, match="payload"):
        validate.payload(value)


def test_payload_names_the_given_argument() -> None:
    with pytest.raises(TypeError, match=r"jobs\[3\]\.payload"):
        validate.payload(object(), "jobs[3].payload")


# -- dedup_key ----------------------------------------------------------------------------------


def test_dedup_key_none_str_and_bytes() -> None:
    assert validate.dedup_key(None) is None
    assert validate.dedup_key("clé") == "clé".encode()
    assert validate.dedup_key(b"\x00\xff") == b"\x00\xff"
    assert validate.dedup_key(bytearray(b"k")) == b"k"
    assert validate.dedup_key("") == b""


def test_dedup_key_up_to_1_kib() -> None:
    assert validate.dedup_key(b"k" * 1024) == b"k" * 1024
    assert validate.dedup_key("é" * 512) == "é".encode() * 512


@pytest.mark.parametrize("value", [b"k" * 1025, "k" * 1025, "é" * 513])
def test_dedup_key_over_1_kib_is_refused(value: str | bytes) -> None:
    with pytest.raises(ValueError, match="dedup_key"):
        validate.dedup_key(value)


@pytest.mark.parametrize("value", [5, 1.5, ["k"], {"k": 1}])
def test_dedup_key_of_another_type_is_refused(value: Any) -> None:
    with pytest.raises(TypeError, match="dedup_key"):
        validate.dedup_key(value)


# -- kind ---------------------------------------------------------------------------------------


def test_kind() -> None:
    assert validate.kind(None) is None
    assert validate.kind("send_email") == "send_email"
    with pytest.raises(ValueError, match="kind"):
        validate.kind("")
    with pytest.raises(TypeError, match="kind"):
        validate.kind(5)


# -- text without a UTF-8 form, and naming the job of a batch -----------------------------------


@pytest.mark.parametrize(("check", "arg"), [(validate.payload, "payload"),
                                            (validate.dedup_key, "dedup_key"),
                                            (validate.kind, "kind")])
def test_a_lone_surrogate_is_refused_by_name(check: Any, arg: str) -> None:
    with pytest.raises(ValueError, match=rf"{arg} must be encodable as UTF-8"):
        check("ok \ud800", arg)


@pytest.mark.parametrize(("job", "kind", "message"), [
    (NewJob(b"x", priority=300), ValueError, r"^jobs\[1\]\.priority must be 0 to 255"),
    (NewJob(object()), TypeError, r"^jobs\[1\]\.payload must be bytes"),
    (NewJob("\udc00"), ValueError, r"^jobs\[1\]\.payload must be encodable as UTF-8"),
    (NewJob(b"x", delay=1, not_before=dt.datetime.now(UTC)), ValueError,
     r"^jobs\[1\]\.delay and jobs\[1\]\.not_before: give one or the other"),
])
def test_a_batch_names_the_job_of_a_bad_field(job: NewJob, kind: type[Exception],
                                              message: str) -> None:
    with pytest.raises(kind, match=message):
        newjobs.columns([NewJob(b"fine"), job])
    with pytest.raises(kind, match=message.replace(r"jobs\[1\]\.", "")):
        newjobs.columns([job])  # alone: the field's plain name


# -- NUL: Postgres text holds none; bytea any byte ----------------------------------------------


@pytest.mark.parametrize(("check", "arg"), [(validate.kind, "kind"), (validate.stream, "stream"),
                                            (validate.stream, "name"),
                                            (validate.step_name, "to_step")])
def test_a_nul_in_a_name_is_refused_by_name(check: Any, arg: str) -> None:
    with pytest.raises(ValueError, match=rf"^{arg} must not contain a NUL character") as caught:
        check("ab\x00c", arg)
    assert "position 2" in str(caught.value)


def test_kind_and_stream_name_their_argument_by_default() -> None:
    with pytest.raises(ValueError, match=r"^kind must not contain a NUL"):
        validate.kind("\x00")
    with pytest.raises(ValueError, match=r"^stream must not contain a NUL"):
        validate.stream("s\x00")
    with pytest.raises(ValueError, match=r"^step name must not contain a NUL"):
        validate.step_name("s\x00")


def test_a_stream_without_a_utf8_form_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^stream must be encodable as UTF-8"):
        validate.stream("s\ud800")


def test_step_name_refuses_empty_and_other_types() -> None:
    assert validate.step_name("fetch") == "fetch"
    with pytest.raises(ValueError, match="to_step must not be empty"):
        validate.step_name("", "to_step")
    with pytest.raises(TypeError, match="to_step must be a str"):
        validate.step_name(3, "to_step")


def test_a_nul_in_a_dedup_key_is_fine_as_str_and_as_bytes() -> None:
    assert validate.dedup_key("a\x00b") == b"a\x00b"
    assert validate.dedup_key(b"\x00") == b"\x00"


def test_an_error_text_is_made_storable_never_refused() -> None:
    assert validate.error_text(None) is None
    assert validate.error_text("plain") == "plain"
    assert validate.error_text("bad\x00byte\x00") == "bad\ufffdbyte\ufffd"
    assert validate.error_text("ünï \ud800 x") == "ünï ? x"
    assert validate.error_text("\x00\udfff") == "\ufffd?"
    assert validate.error_text("é ✓") == "é ✓"


def test_a_dsn_that_cannot_be_parsed_is_never_echoed_with_its_password() -> None:
    """psycopg quotes the DSN it could not parse; pgqueue's error masks its password, in the
    URI form and the key=value form."""
    import pgqueue
    from pgqueue.db import connection

    for bad, secret in (("postgresql://u:sekret@[bad/q", "sekret"),
                        ("host=x password='sek ret3' dbname", "sek ret3"),
                        ("host=x password=hunter2 =", "hunter2")):
        with pytest.raises(ValueError, match="dsn: cannot parse") as refused:
            connection.connect(bad)
        assert secret not in str(refused.value), refused.value
        with pytest.raises(ValueError) as again:
            pgqueue.Queue(bad)
        assert secret not in str(again.value)
