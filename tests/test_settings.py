"""Settings from the environment: which variable sets which field, and what a bad one
says. (The settings are a plain pydantic model read from ``os.environ``, not
pydantic-settings: these are the behaviours it had, kept.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from watchkeeper.runtime import ConfigError
from watchkeeper.runtime._settings import Settings, environment_values, load_settings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith(("WATCHKEEPER_", "DATABASE_URL", "DATABASE_READ_URL")):
            monkeypatch.delenv(name)


def test_each_field_is_read_from_its_variable_and_defaults_when_unset(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """WATCHKEEPER_<FIELD> sets a field (text converted as pydantic converts it);
    an unset variable leaves the default."""
    assert (Settings().workers, Settings().listen, Settings().token) == (2, True, None)
    monkeypatch.setenv("WATCHKEEPER_WORKERS", "7")
    monkeypatch.setenv("WATCHKEEPER_LISTEN", "off")
    monkeypatch.setenv("WATCHKEEPER_HOME", str(tmp_path))
    monkeypatch.setenv("WATCHKEEPER_SECRET_KEY", "k1,k2")
    config = load_settings()
    assert (config.workers, config.listen, config.home) == (7, False, tmp_path)
    assert config.secret_key is not None and config.secret_key.get_secret_value() == "k1,k2"


def test_names_match_without_regard_to_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """As pydantic-settings matched them: watchkeeper_workers sets workers."""
    monkeypatch.setenv("watchkeeper_workers", "5")
    monkeypatch.setenv("Watchkeeper_Schema", "wk_case")
    assert (Settings().workers, Settings().schema) == (5, "wk_case")


def test_database_url_is_read_under_either_name_the_short_one_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """DATABASE_URL or WATCHKEEPER_DATABASE_URL (DATABASE_URL wins when both are set);
    the same for DATABASE_READ_URL."""
    monkeypatch.setenv("WATCHKEEPER_DATABASE_URL", "postgresql://long/db")
    monkeypatch.setenv("WATCHKEEPER_DATABASE_READ_URL", "postgresql://long/standby")
    assert (Settings().database_url, Settings().database_read_url) == (
        "postgresql://long/db", "postgresql://long/standby")
    monkeypatch.setenv("DATABASE_URL", "postgresql://short/db")
    assert Settings().database_url == "postgresql://short/db"
    assert environment_values({"database_url": "x", "UNRELATED": "y"}) == {"database_url": "x"}


def test_fields_given_by_name_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings(workers=3) is 3 whatever WATCHKEEPER_WORKERS says; the others still come
    from the environment."""
    monkeypatch.setenv("WATCHKEEPER_WORKERS", "9")
    monkeypatch.setenv("WATCHKEEPER_LEASE_SECONDS", "90")
    config = Settings(workers=3)
    assert (config.workers, config.lease_seconds) == (3, 90.0)
    # by a variable's name too, as pydantic-settings took them; unknown names are ignored
    monkeypatch.setenv("DATABASE_URL", "postgresql://env/db")
    config = load_settings(DATABASE_URL="postgresql://given/db", WATCHKEEPER_SCHEMA="wk_given",
                           NOT_A_SETTING="x")
    assert (config.database_url, config.schema) == ("postgresql://given/db", "wk_given")
    assert Settings(WATCHKEEPER_DATABASE_URL="postgresql://long/db").database_url \
        == "postgresql://long/db"  # given under either name, it wins over the environment


def test_every_bad_variable_is_named_at_once_with_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each bad value is one line naming its variable (the one that was set, by its
    full name), in one ConfigError; nothing is read half."""
    monkeypatch.setenv("WATCHKEEPER_WORKERS", "many")
    monkeypatch.setenv("WATCHKEEPER_LEASE_SECONDS", "-1")
    monkeypatch.setenv("DATABASE_URL", "postgresql://ok/db")
    monkeypatch.setenv("WATCHKEEPER_SCHEMA", "public")
    with pytest.raises(ConfigError) as raised:
        load_settings()
    lines = str(raised.value).splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [
        "setting WATCHKEEPER_SCHEMA", "setting WATCHKEEPER_LEASE_SECONDS",
        "setting WATCHKEEPER_WORKERS"]
    assert all("Fix:" in line for line in lines)
