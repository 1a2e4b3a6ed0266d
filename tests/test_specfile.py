"""Spec, registration and replay files: encodings, and every problem of every
definition in one error."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from watchkeeper.runtime.usecases import load_data, load_registrations, load_replay_definitions, load_spec
from watchkeeper.triggers import SpecError

MINUTE = timedelta(seconds=60)
LATIN1 = {  # "Relevé" in Latin-1: é is the byte 0xE9
    "toml": 'version = 1\ntitle = "Relev\u00e9"\n',
    "json": '{"version": 1, "title": "Relev\u00e9"}',
}


@pytest.mark.parametrize("suffix", ["toml", "json"])
def test_a_latin1_spec_file_is_refused_naming_the_byte(tmp_path: Path, suffix: str) -> None:
    """A Latin-1 file is not UTF-8: SpecError on 'file' naming the first bad byte's
    offset, worded as the series reader words it."""
    path = tmp_path / f"spec.{suffix}"
    text = LATIN1[suffix]
    path.write_bytes(text.encode("latin-1"))
    offset = text.encode("latin-1").index(b"\xe9")
    with pytest.raises(SpecError) as info:
        load_data(path)
    assert info.value.field == "file"
    assert info.value.problem == f"{path}: not UTF-8 text (byte {offset})."
    assert info.value.fix == "save it as UTF-8."
    with pytest.raises(SpecError, match=r"not UTF-8 text \(byte "):
        load_spec(path, min_interval=MINUTE)


def test_the_same_text_in_utf8_reads(tmp_path: Path) -> None:
    """The file above, saved as UTF-8, reads with its accent."""
    path = tmp_path / "spec.toml"
    path.write_text(LATIN1["toml"], encoding="utf-8")
    assert load_data(path) == {"version": 1, "title": "Relev\u00e9"}


REGISTRATIONS = '''
[[definitions]]
id = "good"
cron = "0 9 * * 1"
zone = "Europe/London"
[[definitions.bindings]]
tenant_id = "acme"
binding_id = "a"
owner_user_id = "u"

[[definitions]]
id = "bad zone and policy"
cron = "0 9 * * 1"
zone = "CET"
late_policy = "sometimes"
colour = "blue"
[[definitions.bindings]]
tenant_id = "acme"
binding_id = "b"
owner_user_id = "u"
agent_name = "digest"

[[definitions]]
id = "both"
cron = "0 9 * * 1"
every = 3600
zone = "UTC"
[[definitions.bindings]]
tenant_id = "acme"
binding_id = "c"
owner_user_id = "u"
'''


def test_a_registration_file_reports_every_problem_of_every_definition(tmp_path: Path) -> None:
    """An unknown key, an unknown binding field, a bad id, a refused zone, a bad
    policy in one table and two cadences in another: one error, all six, each under
    its definition's index."""
    path = tmp_path / "ops.toml"
    path.write_text(REGISTRATIONS)
    with pytest.raises(SpecError) as info:
        load_registrations(path, min_interval=MINUTE)
    assert [p.field for p in info.value.problems] == [
        "definitions.1.colour", "definitions.1.bindings.0.agent_name", "definitions.1.id",
        "definitions.1.zone", "definitions.1.late_policy", "definitions.2.cron"]
    assert "use 'Europe/Paris' or 'Europe/Berlin'" in info.value.problems[3].fix


def test_a_good_registration_file_loads(tmp_path: Path) -> None:
    """Only the first table of the file above: one definition, its binding intact."""
    path = tmp_path / "ops.toml"
    path.write_text(REGISTRATIONS.split("\n\n")[0])
    [definition] = load_registrations(path, min_interval=MINUTE)
    assert (definition.id, definition.zone, definition.static_bindings[0].binding_id) == (
        "good", "Europe/London", "a")


REPLAY = '''
[[definitions]]
id = "one"
version = 1
[definitions.trigger]
type = "condition"
mode = "every_edge"
source = { name = "series", version = "1" }
poll_every = 86400
predicate = { subject = "X", op = "<=", threshold = "10 blorbs" }

[[definitions]]
id = "two"
version = 1
titel = "typo"
[definitions.trigger]
type = "cron"
expr = "0 9 * * *"
zone = "UTC"
'''


def test_a_replay_file_reports_every_problem_of_every_definition(tmp_path: Path) -> None:
    """A bad threshold unit in one definition, an unknown field and a non-condition
    trigger in the other: all named under definitions[i]."""
    path = tmp_path / "replay.toml"
    path.write_text(REPLAY)
    with pytest.raises(SpecError) as info:
        load_replay_definitions(path, min_interval=MINUTE)
    assert [p.field for p in info.value.problems] == [
        "definitions[0].trigger.predicate.threshold", "definitions[1].titel"]


def test_a_replay_file_names_a_non_condition_trigger(tmp_path: Path) -> None:
    """Without the typo, the cron definition is refused for its type."""
    path = tmp_path / "replay.toml"
    path.write_text(REPLAY.replace('titel = "typo"\n', "").replace("10 blorbs", "10 USD"))
    with pytest.raises(SpecError) as info:
        load_replay_definitions(path, min_interval=MINUTE)
    assert [(p.field, p.problem) for p in info.value.problems] == [
        ("definitions[1].trigger.type", "is 'cron'; replay runs conditional definitions.")]
