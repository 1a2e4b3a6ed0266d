"""The command line as a user runs it: a subprocess per command, against the test's
database (DATABASE_URL) and a temporary WATCHKEEPER_HOME."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from watchkeeper.runtime.store._db import Database

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


async def cli(*args: str, dsn: str | None, home: Path, check: bool = True) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["WATCHKEEPER_HOME"] = str(home)
    env["COLUMNS"] = "200"
    if dsn is not None:
        env["DATABASE_URL"] = dsn
    result = await anyio.run_process([sys.executable, "-m", "watchkeeper", *args], env=env,
                                     check=False)
    out, err = result.stdout.decode(), result.stderr.decode()
    if check and result.returncode != 0:
        raise AssertionError(f"watchkeeper {' '.join(args)} exited {result.returncode}:\n{err}")
    return result.returncode, out, err


async def test_preview_json_is_the_stable_contract(tmp_path: Path) -> None:
    """scheduled_for ends in Z, local has the offset, slots are strictly after --after."""
    _, out, _ = await cli("preview", "--cron", "*/45 * * * *", "--tz", "Europe/Berlin",
                          "--after", "2026-03-29T00:00:00Z", "--count", "4", "--json",
                          dsn=None, home=tmp_path)
    items = json.loads(out)
    assert [(i["scheduled_for"], i["local"], i["slot"]) for i in items] == [
        ("2026-03-29T00:45:00Z", "2026-03-29T01:45:00+01:00", "2026-03-29T01:45[Europe/Berlin]"),
        ("2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00", "2026-03-29T03:00[Europe/Berlin]"),
        ("2026-03-29T01:45:00Z", "2026-03-29T03:45:00+02:00", "2026-03-29T03:45[Europe/Berlin]"),
        ("2026-03-29T02:00:00Z", "2026-03-29T04:00:00+02:00", "2026-03-29T04:00[Europe/Berlin]"),
    ]
    assert items[1]["note"] == ("UTC offset +01:00 -> +02:00 since the previous occurrence: "
                                "same local time, 1 h earlier in UTC")
    assert {tuple(sorted(i)) for i in items} == {("local", "note", "runs", "scheduled_for", "slot")}


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--cron", "0 0 31 2 *", "--tz", "UTC"], "--cron: '0 0 31 2 *' never fires"),
     (["--at", "2020-01-01T00:00", "--tz", "UTC"], "no occurrence after"),
     (["--cron", "0 9 * * 1"], "--tz: no time zone given"),
     (["--cron", "0 9 * * 1", "--tz", "Mars/Base"], "--tz: unknown time zone 'Mars/Base'"),
     (["--cron", "0 9 * * 1", "--zone", "europe/paris"],
      "--tz: unknown time zone 'europe/paris'. Fix: did you mean 'Europe/Paris'?"),
     (["--cron", "@daily", "--tz", "UTC"], "--cron: '@daily' has 1 field; a cron expression"),
     (["--cron", "0 9 * *", "--tz", "UTC"], "--cron: '0 9 * *' has 4 fields;"),
     (["--every", "30"], "--every: 30 s is under the minimum resolution of 60 s"),
     ([str(EXAMPLES / "weekly_rank_check.toml")],
      "Fix: propose a single spec; give a file of calendar registrations to 'watchkeeper "
      "register', one of condition definitions to 'watchkeeper replay --definitions'."),
     (["--at", "2026-03-29T02:30", "--tz", "Europe/Berlin"], "does not exist in Europe/Berlin")],
)
async def test_preview_errors_exit_2_with_the_reason_on_stderr(tmp_path: Path, args: list[str],
                                                                words: str) -> None:
    """Bad or empty schedules exit non-zero and say why on stderr."""
    code, out, err = await cli("preview", *args, dsn=None, home=tmp_path, check=False)
    assert code == 2
    assert out == ""
    assert words in " ".join(err.split())


async def test_help_shows_the_docstrings_as_written(tmp_path: Path) -> None:
    """Help text is read as Markdown: a docstring's line breaks are rewrapped (not kept
    mid-sentence), ````--json```` shows as --json, and square brackets are text, not
    rich markup tags that would be swallowed."""
    _, top, _ = await cli("--help", dsn=None, home=tmp_path)
    flat = " ".join(top.replace("│", " ").split())
    assert "``" not in top
    assert "the printed hash. --json prints the HTTP API's answer" in flat
    assert "until SIGTERM / SIGINT (the supervisor drains as in run)" in flat
    # the command list's rows wrap at the terminal's width, not at the docstring's lines
    run_row = next(line for line in top.splitlines() if "│ run " in line)
    assert "runs in flight get" in run_row
    _, replay, _ = await cli("replay", "--help", dsn=None, home=tmp_path)
    assert "TOML/JSON with [[definitions]]: id + a condition spec." in replay
    _, run, _ = await cli("run", "--help", dsn=None, home=tmp_path)
    assert "NAME[@VERSION]=CSV: a series source." in run


@pytest.mark.parametrize(
    ("args", "fields"),
    [# several problems at once, each under the option typed (--zone is --tz)
     (["--cron", "0 9 * * 1", "--zone", "Nowhere", "--after", "nonsense"], ["--after", "--tz"]),
     (["--cron", "0 9 * *", "--tz", "Nowhere", "--dst-gap", "later"],
      ["--cron", "--tz", "--dst-gap"]),
     # options the chosen schedule does not read are refused, not ignored
     (["--every", "3600", "--tz", "UTC", "--dst-gap", "skip"], ["--tz", "--dst-gap"]),
     (["--cron", "0 9 * * 1", "--tz", "UTC", "--anchor", "2026-01-01T00:00:00Z"], ["--anchor"]),
     ([str(EXAMPLES / "holdings_review.toml"), "--tz", "UTC"], ["--tz"]),
     # a spec file's own problems keep the spec's field names
     ([str(EXAMPLES / "holdings_review.toml"), "--after", "bad"], ["--after"]),
     ([], ["preview"]), (["--cron", "0 9 * * 1", "--every", "60"], ["preview"]),
     # the schedule as a whole (no occurrence) is the option that gave it
     (["--at", "2020-01-01T00:00:00", "--tz", "UTC", "--after", "2026-01-01"], ["--at"]),
     # a plain date is bounded as an instant is (0001-01-01 was a traceback); an empty
     # value is a value, not the option left out
     (["--at", "2026-06-01T09:00", "--tz", "Europe/London", "--after", "0001-01-01"],
      ["--after"]),
     (["--every", "PT30M", "--after", "2200-01-02"], ["--after"]),
     (["--every", "PT30M", "--after", ""], ["--after"]),
     (["--cron", "0 9 * * *", "--tz", "UTC", "--dst-gap", ""], ["--dst-gap"]),
     (["--at", "2026-06-01T09:00", "--tz", ""], ["--tz", "--at"])],
)
async def test_preview_json_errors_name_every_option(tmp_path: Path, args: list[str],
                                                     fields: list[str]) -> None:
    """Under --json every problem of the command line is one entry of the JSON list on
    stdout, named by the option (a spec file's own fields keep their names)."""
    code, out, _ = await cli("preview", *args, "--json", dsn=None, home=tmp_path, check=False)
    assert code == 2
    assert [problem["field"] for problem in json.loads(out)] == fields


@pytest.mark.parametrize(("args", "words"), [
    (["history", "--tenant", "acme", "--since", ""], "--since: '' is not an ISO 8601 time"),
    (["history", "--tenant", "acme", "--until", "0001-01-01"], "--until: '0001-01-01' is outside"),
    (["replay", "--definitions", str(EXAMPLES / "conditions" / "stocks.toml"), "--series",
      str(EXAMPLES / "series" / "stocks.csv"), "--from", "0001-01-01"],
     "--from: '0001-01-01' is outside 1970-2200"),
])
async def test_instant_options_refuse_empty_and_far_dates(tmp_path: Path, args: list[str],
                                                          words: str) -> None:
    """An empty instant is a value to refuse, not the option left out; a plain date is
    bounded to 1970-2200 as a full instant is."""
    code, _, err = await cli(*args, dsn=None, home=tmp_path, check=False)
    assert (code, words in " ".join(err.split())) == (2, True), err


async def test_preview_options_say_what_they_are(tmp_path: Path) -> None:
    """What the spec says of a field, preview says of the option: a warning, the words of
    a problem and its fix; a spec file's problems keep the spec's names; --every takes an
    ISO 8601 duration as its help says."""
    _, _, err = await cli("preview", "--cron", "0 9 * * 1", "--tz", "US/Eastern", "--count", "1",
                          "--after", "2026-01-01", dsn=None, home=tmp_path)
    assert "note: --tz: US/Eastern is stored as America/New_York" in " ".join(err.split())
    _, _, err = await cli("preview", "--at", "2026-12-02T09:00:00", "--zone", "EST",
                          dsn=None, home=tmp_path, check=False)
    assert "--at: whether this local time exists" in err and "is checked once --tz is valid" in err
    assert "trigger." not in err
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLES.joinpath("holdings_review.toml").read_text()
                   .replace('zone = "Europe/Paris"', 'zone = "Nowhere"'))
    assert 'zone = "Nowhere"' in bad.read_text()
    code, out, _ = await cli("preview", str(bad), "--json", dsn=None, home=tmp_path, check=False)
    assert (code, [p["field"] for p in json.loads(out)]) == (2, ["trigger.zone"])
    _, out, _ = await cli("preview", "--every", "PT30M", "--anchor", "2026-01-01T00:00:00Z",
                          "--after", "2026-01-01", "--count", "2", "--json", dsn=None, home=tmp_path)
    assert [i["scheduled_for"] for i in json.loads(out)] == ["2026-01-01T00:30:00Z",
                                                             "2026-01-01T01:00:00Z"]
    _, _, err = await cli("preview", "--every", "316224001", dsn=None, home=tmp_path, check=False)
    assert ("--every: 316,224,001 s is longer than the maximum of 316,224,000 s (3,660 days)"
            in " ".join(err.split()))


async def test_propose_confirm_trigger_tick_history(db: Database, db_dsn: str,
                                                    tmp_path: Path) -> None:
    """The whole user path: token, proposal, confirmation with the hash, a manual run,
    one tick that runs it, and the history with the six facts."""
    _, out, _ = await cli("users", "add", "demo", "alice", dsn=db_dsn, home=tmp_path)
    token = out.strip().splitlines()[-1]
    assert token.startswith("wk_")
    _, out, _ = await cli("propose", str(EXAMPLES / "holdings_review.toml"), "--tenant", "demo",
                          "--id", "holdings", "--owner", "alice", "--json", dsn=db_dsn, home=tmp_path)
    proposal = json.loads(out)
    assert (proposal["revision"], proposal["needs_confirmation"]) == (1, True)
    assert all(item["local"].endswith(("+01:00", "+02:00")) for item in proposal["next"])
    code, _, err = await cli("confirm", "holdings", "--revision", "1", "--spec-hash", "f" * 64,
                             "--token", token, dsn=db_dsn, home=tmp_path, check=False)
    assert code == 5 and "spec hash mismatch" in err
    await cli("confirm", "holdings", "--revision", "1", "--spec-hash", proposal["spec_hash"],
              "--token", token, dsn=db_dsn, home=tmp_path)
    _, out, _ = await cli("list", "--json", "--tenant", "demo", dsn=db_dsn, home=tmp_path)
    (row,) = json.loads(out)
    assert (row["definition_id"], row["status"], row["effective_revision"]) == ("holdings", "active", 1)
    _, out, _ = await cli("trigger", "holdings", "--token", token, dsn=db_dsn, home=tmp_path)
    assert "manual" in out and "admitted" in out
    _, out, _ = await cli("tick", dsn=db_dsn, home=tmp_path)
    assert json.loads(out)["tasks"] == {"completed": 1}
    _, out, _ = await cli("history", "holdings", "--tenant", "demo", "--json", dsn=db_dsn,
                          home=tmp_path)
    (entry,) = json.loads(out)["items"]
    assert (entry["kind"], entry["decision"], entry["task_status"], entry["verified"]) == (
        "manual", "admitted", "completed", True)
    assert [d["status"] for d in entry["deliveries"]] == ["delivered"]
    notice = json.loads((tmp_path / "notices" / "demo" / "holdings-notices.jsonl").read_text())
    assert notice["report_ref"] == f"report:demo/{entry['task_id']}"
    _, out, _ = await cli("report", str(entry["task_id"]), "--tenant", "demo", dsn=db_dsn,
                          home=tmp_path)
    assert "receipt: verified" in out and "# Wednesday holdings review" in out
    code, _, err = await cli("history", "--status", "bogus", dsn=db_dsn, home=tmp_path, check=False)
    assert code == 2 and "--status" in err


@pytest.mark.parametrize(
    ("spec", "field"),
    [('version = 1\n[trigger]\ntype = "cron"\nexpr = "61 9 * * *"\nzone = "UTC"\n', "trigger.expr"),
     ('version = 1\n[trigger]\ntype = "cron"\nexpr = "0 9 * * *"\nzone = "Europe/Narnia"\n',
      "trigger.zone"),
     ('version = 1\n[trigger]\ntype = "cron"\nexpr = "0 9 * * *"\n', "trigger.zone"),
     ('version = 1\n[trigger]\ntype = "interval"\nevery = 30\n', "trigger.every"),
     ('version = 1\n[trigger]\ntype = "sometimes"\n', "trigger.type"),
     ('version = 1\n[trigger]\ntype = "condition"\nmode = "every_edge"\n', "trigger.source"),
     ('version = 7\n[trigger]\ntype = "cron"\n', "version"),
     ('version = 1\n[trigger\n', "file")],
)
async def test_bad_specs_are_refused_and_store_nothing(db: Database, db_dsn: str, tmp_path: Path,
                                                       spec: str, field: str) -> None:
    """Each bad spec exits 2 naming the field; no definition or revision is stored."""
    await cli("users", "add", "demo", "alice", dsn=db_dsn, home=tmp_path)
    path = tmp_path / "bad.toml"
    path.write_text(spec)
    code, _, err = await cli("propose", str(path), "--tenant", "demo", "--id", "x", "--owner",
                             "alice", dsn=db_dsn, home=tmp_path, check=False)
    assert code == 2
    assert f"error: {field}:" in " ".join(err.split()) or f"- {field}:" in err
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [('[[definitions]]\nid = "x"\ncron = "0 9 * * 1"\nzone = "UTC"\nevery = 60\n'
      '[[definitions.bindings]]\ntenant_id = "a"\nbinding_id = "b"\nowner_user_id = "u"\n',
      "definitions.0.cron"),
     ('[[definitions]]\nid = "x"\n[[definitions.bindings]]\ntenant_id = "a"\nbinding_id = "b"\n'
      'owner_user_id = "u"\n', "definitions.0.cron")],
)
async def test_register_needs_exactly_one_cadence(db: Database, db_dsn: str, tmp_path: Path,
                                                  body: str, field: str) -> None:
    """Both or neither of cron and every: exit 2, nothing stored."""
    path = tmp_path / "ops.toml"
    path.write_text(body)
    code, _, err = await cli("register", str(path), dsn=db_dsn, home=tmp_path, check=False)
    assert code == 2 and f"error: {field}: declare exactly one of cron and every" in err
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 0


async def test_register_the_weekly_rank_check_example(db: Database, db_dsn: str,
                                                      tmp_path: Path) -> None:
    """The example registers once per run of the command, never duplicating."""
    for tenant, user in (("org_acme", "user_acme_owner"), ("org_globex", "user_globex_owner")):
        await cli("users", "add", tenant, user, dsn=db_dsn, home=tmp_path)
    for _ in range(2):
        _, out, _ = await cli("register", str(EXAMPLES / "weekly_rank_check.toml"), dsn=db_dsn,
                              home=tmp_path)
        assert "registered seo.weekly-rank-check (revision 1)" in out
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 1


async def test_unreachable_database_exits_6(tmp_path: Path) -> None:
    """A DATABASE_URL nobody listens on is reported, not a traceback."""
    code, _, err = await cli("list", dsn="postgresql://postgres@127.0.0.1:1/postgres",
                             home=tmp_path, check=False)
    assert code == 6 and "error:" in err and "Traceback" not in err


def test_every_example_parses() -> None:
    """The shipped examples are valid specs or registrations."""
    from datetime import timedelta

    from watchkeeper.runtime.usecases import load_registrations, load_spec

    specs = [p for p in EXAMPLES.glob("*.toml") if p.name != "weekly_rank_check.toml"]
    assert len(specs) == 5
    for path in specs:
        load_spec(path, min_interval=timedelta(seconds=60))
    (rank,) = load_registrations(EXAMPLES / "weekly_rank_check.toml",
                                 min_interval=timedelta(seconds=60))
    assert [b.tenant_id for b in rank.static_bindings or ()] == ["org_acme", "org_globex"]




async def test_webhook_outbox_from_the_command_line(db: Database, db_dsn: str,
                                                    tmp_path: Path) -> None:
    """webhooks add -> a signed notice reaches a live receiver on tick; deliveries and
    history show it with its attempts; redeliver resends under the same id; a rotated
    secret signs alongside the old one; bad preferences name the option."""
    from watchkeeper.outbox import Receiver, serve

    receiver = Receiver(())
    async with serve(receiver) as url:
        _, out, _ = await cli("users", "add", "acme", "alice", dsn=db_dsn, home=tmp_path)
        token = out.strip().splitlines()[-1]
        _, out, _ = await cli("webhooks", "add", "acme", "ops", url, dsn=db_dsn, home=tmp_path)
        secret = out.strip().splitlines()[-1]
        assert secret.startswith("whsec_")
        receiver.secrets = (secret,)
        spec = tmp_path / "spec.toml"
        spec.write_text('version = 1\n[trigger]\ntype = "interval"\nevery = 86400\n'
                        '[[delivery]]\nchannel = "webhook"\ndestination = "ops"\n')
        _, out, _ = await cli("propose", str(spec), "--tenant", "acme", "--id", "hooked",
                              "--owner", "alice", "--json", dsn=db_dsn, home=tmp_path)
        proposal = json.loads(out)
        await cli("confirm", "hooked", "--revision", "1", "--spec-hash", proposal["spec_hash"],
                  "--token", token, dsn=db_dsn, home=tmp_path)
        await cli("trigger", "hooked", "--token", token, dsn=db_dsn, home=tmp_path)
        await cli("tick", dsn=db_dsn, home=tmp_path)
        (delivery_id,) = receiver.seen
        assert receiver.seen[delivery_id].payload is not None
        body = receiver.seen[delivery_id].payload
        assert body is not None and body["type"] == "report.committed"
        assert (body["data"]["definition_id"], body["data"]["delivery_id"]) == ("hooked",
                                                                               delivery_id)
        assert body["timestamp"] == body["data"]["committed_at"]
        _, out, _ = await cli("deliveries", "--tenant", "acme", "--json", dsn=db_dsn,
                              home=tmp_path)
        (row,) = json.loads(out)
        assert (row["delivery_id"], row["channel"], row["destination"], row["status"],
                row["attempts"]) == (delivery_id, "webhook", "ops", "delivered", 1)
        await cli("redeliver", delivery_id, "--tenant", "acme", dsn=db_dsn, home=tmp_path)
        _, out, _ = await cli("webhooks", "rotate", "acme", "ops", dsn=db_dsn, home=tmp_path)
        receiver.secrets = (out.strip().splitlines()[-1],)  # only the new one is accepted
        await cli("tick", dsn=db_dsn, home=tmp_path)
        record = receiver.seen[delivery_id]
        assert (record.requests, record.answered_ok, receiver.processed, receiver.rejected) == (
            2, 2, 1, 0)
        _, out, _ = await cli("history", "hooked", "--tenant", "acme", "--json", dsn=db_dsn,
                              home=tmp_path)
        (entry,) = json.loads(out)["items"]
        assert [(d["status"], d["attempts"], d["redeliveries"])
                for d in entry["deliveries"]] == [("delivered", 1, 1)]
        _, out, _ = await cli("deliveries", "--tenant", "acme", "--attempts", dsn=db_dsn,
                              home=tmp_path)
        assert out.count("delivered") >= 3  # the row and its two logged attempts
        code, _, err = await cli("prefs", "set", "acme", "alice", "--quiet", "22-7",
                                 dsn=db_dsn, home=tmp_path, check=False)
        assert code == 2 and "--quiet 22:00-07:00" in err
        code, _, err = await cli("redeliver", "00000000-0000-0000-0000-000000000000",
                                 "--tenant", "acme", dsn=db_dsn, home=tmp_path, check=False)
        assert code == 3


async def test_outbox_commands_refuse_bad_input_with_exit_2(db: Database, db_dsn: str,
                                                            tmp_path: Path) -> None:
    """A port in use, a port out of range, a secret that is not one, an unknown status:
    exit 2 with the option named, no traceback; status reports the outbox backlog."""
    import socket

    busy = socket.create_server(("127.0.0.1", 0))
    try:
        port = str(busy.getsockname()[1])
        secret = "whsec_" + "a" * 43 + "="
        for args, option in [(["receiver", "--secret", secret, "--port", port], "--port"),
                             (["receiver", "--secret", secret, "--port", "99999"], "--port"),
                             (["receiver", "--secret", "notasecret"], "--secret"),
                             (["deliveries", "--status", "bogus"], "--status")]:
            code, _, err = await cli(*args, dsn=db_dsn, home=tmp_path, check=False)
            assert code == 2 and option in err and "Traceback" not in err, (args, err)
    finally:
        busy.close()
    _, out, _ = await cli("status", "--json", dsn=db_dsn, home=tmp_path)
    assert json.loads(out) == {"supervisors": [], "unclaimable": [], "deliveries": {},
                               "oldest_due": None}


REPLAY_DEFS = """
[[definitions]]
id = "dip"
version = 1
delivery = []
[definitions.trigger]
type = "condition"
mode = "every_edge"
source = { name = "series", version = "1" }
poll_every = "P1D"
[definitions.trigger.predicate]
subject = "X"
op = "<="
threshold = "10 USD/share"
"""


async def test_replay_json_lines_are_the_stable_contract(db: Database, db_dsn: str,
                                                         tmp_path: Path) -> None:
    """One JSON object per line: at, definition, subject, verdict, action, reason, task;
    a missing cell is unknown (neither fires nor re-arms), a EUR price does not compare."""
    (tmp_path / "defs.toml").write_text(REPLAY_DEFS)
    (tmp_path / "series.csv").write_text(
        "as_of,subject,value,unit,currency\n"
        "2024-01-01,X,12,USD/share,USD\n"
        "2024-01-02,X,9,USD/share,USD\n"
        "2024-01-03,X,,USD/share,USD\n"
        "2024-01-04,X,8,USD/share,USD\n"
        "2024-01-05,X,11,USD/share,USD\n"
        "2024-01-06,X,9,EUR/share,EUR\n"
        "2024-01-07,X,9,USD/share,USD\n")
    _, out, err = await cli("replay", "--definitions", str(tmp_path / "defs.toml"),
                            "--series", str(tmp_path / "series.csv"), "--json", "--keep",
                            dsn=db_dsn, home=tmp_path)
    lines = [json.loads(line) for line in out.splitlines()]
    polls = [e for e in lines if not e["action"].startswith("task_")]
    assert [(e["at"], e["verdict"], e["action"]) for e in polls] == [
        ("2024-01-01T00:00:00Z", "false", "none"),
        ("2024-01-02T00:00:00Z", "true", "fired"),
        ("2024-01-03T00:00:00Z", "unknown", "none"),
        ("2024-01-04T00:00:00Z", "true", "none"),
        ("2024-01-05T00:00:00Z", "false", "none"),
        ("2024-01-06T00:00:00Z", "unknown", "none"),
        ("2024-01-07T00:00:00Z", "true", "fired")]
    assert {k for e in lines for k in ("at", "definition", "subject", "verdict", "action",
                                       "reason", "task") if k not in e} == set()
    fired = [e for e in polls if e["action"] == "fired"]
    done = [e for e in lines if e["action"] == "task_completed"]
    assert [e["task"] for e in done] == [e["task"] for e in fired]
    assert all(e["subject"] == "X" and e["definition"] == "dip" for e in polls)
    assert "7 polls" in err and "stored under tenant _replay-" in err
    tenant = err.split("stored under tenant ")[1].split()[0]
    rows = await db.pool.fetch("SELECT slot FROM tasks WHERE tenant_id = $1 ORDER BY slot", tenant)
    assert [r["slot"] for r in rows] == ["2024-01-02T00:00:00Z", "2024-01-07T00:00:00Z"]
    _, out, _ = await cli("polls", "dip", "--tenant", tenant, "--changes", "--json",
                          dsn=db_dsn, home=tmp_path)
    page = json.loads(out)
    timeline = page["polls"]
    assert page["next_after"] is None
    assert [(p["slot"], p["verdict"], p["action"]) for p in timeline] == [
        ("2024-01-01T00:00:00Z", "false", "none"), ("2024-01-02T00:00:00Z", "true", "fired"),
        ("2024-01-03T00:00:00Z", "unknown", "none"), ("2024-01-04T00:00:00Z", "true", "none"),
        ("2024-01-05T00:00:00Z", "false", "none"), ("2024-01-06T00:00:00Z", "unknown", "none"),
        ("2024-01-07T00:00:00Z", "true", "fired")]
    assert timeline[2]["observations"][0]["status"] == "missing"
    assert timeline[5]["observations"][0]["currency"] == "EUR"


@pytest.mark.parametrize(("series", "defs", "words"), [
    ("as_of,subject,value\n", REPLAY_DEFS, "--series"),
    ("as_of,subject,value,unit,currency\n2024-01-01,X,ten,USD/share,USD\n", REPLAY_DEFS,
     "series.csv:2: value 'ten' is not a number"),
    ("as_of,subject,value,unit,currency\n2024-01-01,X,1,USD/share,USD\n",
     REPLAY_DEFS.replace("10 USD/share", "10 USD/parsec_per_glorp"),
     "definitions[0].trigger.predicate.threshold"),
    ("as_of,subject,value,unit,currency\n2024-01-01,X,1,USD/share,USD\n",
     REPLAY_DEFS.replace('version = "1"', 'version = "2"'), "dip.trigger.source"),
])
async def test_replay_bad_input_exits_2(db_dsn: str, tmp_path: Path, series: str, defs: str,
                                        words: str) -> None:
    (tmp_path / "defs.toml").write_text(defs)
    (tmp_path / "series.csv").write_text(series)
    code, _, err = await cli("replay", "--definitions", str(tmp_path / "defs.toml"),
                             "--series", str(tmp_path / "series.csv"), "--to",
                             "2024-01-05T00:00:00Z", dsn=db_dsn, home=tmp_path, check=False)
    assert code == 2, err
    assert words in " ".join(err.split())


SERIES = ("as_of,subject,value,unit,currency\n"
          "2024-01-01,X,12,USD/share,USD\n2024-01-02,X,9,USD/share,USD\n"
          "2024-01-03,X,11,USD/share,USD\n2024-01-04,X,8,USD/share,USD\n")


@pytest.mark.parametrize("keep", [False, True])
async def test_replay_into_a_closed_pipe_exits_cleanly_and_leaves_nothing_due(
        db: Database, db_dsn: str, tmp_path: Path, keep: bool) -> None:
    """``replay --json | head -1`` exits 0 without a traceback; afterwards nothing of the
    replay is due in the outbox (removed, or with --keep its unsent notices suppressed),
    so ``status`` reports no pending notice."""
    (tmp_path / "defs.toml").write_text(REPLAY_DEFS)
    (tmp_path / "series.csv").write_text(SERIES)
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(WATCHKEEPER_HOME=str(tmp_path), DATABASE_URL=db_dsn)
    command = (f"{sys.executable} -m watchkeeper replay --definitions {tmp_path / 'defs.toml'} "
               f"--series {tmp_path / 'series.csv'} --json {'--keep' if keep else ''} "
               "| head -1; exit ${PIPESTATUS[0]}")
    result = await anyio.run_process(["bash", "-c", command], env=env, check=False)
    err = result.stderr.decode()
    assert result.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert len(result.stdout.decode().splitlines()) == 1
    due = await db.pool.fetchval("SELECT count(*) FROM deliveries WHERE status IN "
                                 "('pending', 'retrying', 'delivering')")
    tenants = await db.pool.fetchval("SELECT count(*) FROM tenants WHERE tenant_id LIKE "
                                     "'\\_replay-%'")
    assert (due, tenants) == (0, 1 if keep else 0)
    _, out, _ = await cli("status", dsn=db_dsn, home=tmp_path)
    assert "outbox: empty" in out or "pending" not in out
    _, out, err = await cli("replays", "prune", "--older-than", "P1D", dsn=db_dsn, home=tmp_path)
    assert "0 replay tenant(s) removed" in err
    _, out, err = await cli("replays", "prune", dsn=db_dsn, home=tmp_path)  # default: all
    assert f"{1 if keep else 0} replay tenant(s) removed" in err
    assert await db.pool.fetchval("SELECT count(*) FROM tenants") == 0


async def test_what_a_new_user_tripped_over(db: Database, db_dsn: str, tmp_path: Path) -> None:
    """Each item the new-user report listed, run as that user ran it: an unknown
    definition is exit 3 in history, polls, show and trigger alike; a truncated
    --spec-hash says it is truncated; a plain date is 00:00 UTC; show, webhooks list and
    propose --json carry what they lacked."""
    _, out, _ = await cli("users", "add", "acme", "alice", dsn=db_dsn, home=tmp_path)
    token = out.strip().splitlines()[-1]
    for args in (["history", "nosuch", "--tenant", "acme"], ["polls", "nosuch", "--tenant", "acme"],
                 ["show", "nosuch", "--tenant", "acme"], ["trigger", "nosuch", "--tenant", "acme"]):
        code, out, err = await cli(*args, dsn=db_dsn, home=tmp_path, check=False)
        assert (code, out) == (3, ""), (args, err)
        assert "nosuch" in err
    spec = tmp_path / "spec.toml"
    spec.write_text((EXAMPLES / "holdings_review.toml").read_text()
                    + '\ntitle = "Holdings"\nnotes = "every Wednesday"\n'
                    if "title" not in (EXAMPLES / "holdings_review.toml").read_text()
                    else (EXAMPLES / "holdings_review.toml").read_text())
    _, out, _ = await cli("propose", str(EXAMPLES / "holdings_review.toml"), "--tenant", "acme",
                          "--id", "holdings", "--owner", "alice", "--json", dsn=db_dsn,
                          home=tmp_path)
    proposal = json.loads(out)
    assert (proposal["title"], proposal["notes"]) == (
        "Wednesday holdings review",
        "Descriptive fields (title, notes) can change without a new confirmation.")
    code, _, err = await cli("confirm", "holdings", "--revision", "1", "--spec-hash",
                             proposal["spec_hash"][:12], "--token", token, dsn=db_dsn,
                             home=tmp_path, check=False)
    flat = " ".join(err.split())
    assert code == 5 and "has 12 characters" in flat and "64 hexadecimal digits" in flat
    _, out, _ = await cli("show", "holdings", "--tenant", "acme", "--json", dsn=db_dsn, home=tmp_path)
    shown = json.loads(out)
    assert (shown["definition_id"], shown["status"], [r["status"] for r in shown["revisions"]]) \
        == ("holdings", "proposed", ["proposed"])
    await cli("webhooks", "add", "acme", "ops", "https://example.com/hook", dsn=db_dsn, home=tmp_path)
    _, out, _ = await cli("webhooks", "list", "--tenant", "acme", "--json", dsn=db_dsn, home=tmp_path)
    (hook,) = json.loads(out)
    assert (hook["name"], hook["url"], hook["active_secrets"]) == ("ops", "https://example.com/hook", 1)
    assert "secret" not in {k for k in hook if k != "active_secrets"}
    _, out, _ = await cli("preview", "--every", "3600", "--after", "2026-12-02", "--count", "1",
                          "--json", dsn=None, home=tmp_path)
    assert json.loads(out)[0]["scheduled_for"] == "2026-12-02T01:00:00Z"
    code, _, err = await cli("history", "--since", "2026-13-01", dsn=db_dsn, home=tmp_path,
                             check=False)
    assert code == 2 and "--since" in err and "2026-12-02" in err


def test_a_next_step_never_cuts_a_quoted_name() -> None:
    """History's next step shortens a long dead-delivery error at a word boundary and
    keeps a quoted endpoint name whole."""
    from watchkeeper.runtime.usecases import next_step

    error = ("deliver: no webhook endpoint named 'demo-hook-20261201-0123456789abcdef' in "
             "tenant demo, so the notice cannot be sent anywhere at all")
    step = next_step({"tenant_id": "demo", "deliveries": [
        {"status": "dead", "channel": "webhook", "delivery_id": "d1", "last_error": error}]})
    assert step is not None
    assert "'demo-hook-20261201-0123456789abcdef'" in step
    assert step.count("'") == 2 and "…" in step
    assert step.endswith("watchkeeper redeliver d1 --tenant demo")


async def test_configuration_errors_exit_2_and_the_schema_is_honoured(
        db: Database, db_dsn: str, tmp_path: Path) -> None:
    """A database that does not exist and a DSN that is not a URL are configuration
    (exit 2, with the fix); WATCHKEEPER_SCHEMA puts the CLI's tables in that schema."""
    from conftest import with_database

    missing = with_database(db_dsn, "wk_no_such_database")
    code, _, err = await cli("list", dsn=missing, home=tmp_path, check=False)
    assert code == 2 and "does not exist" in err and "createdb wk_no_such_database" in err, err
    code, _, err = await cli("list", dsn="notaurl", home=tmp_path, check=False)
    assert code == 2 and "Fix" in err and "Traceback" not in err
    env_schema = {"WATCHKEEPER_SCHEMA": "public"}
    os.environ.update(env_schema)
    try:
        code, _, err = await cli("list", dsn=db_dsn, home=tmp_path, check=False)
        assert code == 2 and "WATCHKEEPER_SCHEMA" in err and "WATCHKEEPER_WATCHKEEPER" not in err
        os.environ["WATCHKEEPER_SCHEMA"] = "wk_cli"
        await cli("users", "add", "acme", "alice", dsn=db_dsn, home=tmp_path)
    finally:
        os.environ.pop("WATCHKEEPER_SCHEMA", None)
    assert await db.pool.fetchval("SELECT count(*) FROM wk_cli.users") == 1
    assert await db.pool.fetchval("SELECT count(*) FROM watchkeeper.users") == 0


async def test_every_spec_problem_at_once_and_as_json(db: Database, db_dsn: str,
                                                       tmp_path: Path) -> None:
    """A spec with three mistakes: propose prints all three (field, problem, fix) on
    stderr; with --json it prints them as a JSON list on stdout; exit 2, nothing stored.
    A units file's definitions are read before the spec, so a spec in its unit passes."""
    await cli("users", "add", "acme", "alice", dsn=db_dsn, home=tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\ntitel = "typo"\n[trigger]\ntype = "cron"\nexpr = "0 20 * * 3"\n'
                   'zone = "CET"\n[lateness]\npolicy = "whenever"\n')
    args = ("propose", str(bad), "--tenant", "acme", "--id", "x", "--owner", "alice")
    code, out, err = await cli(*args, dsn=db_dsn, home=tmp_path, check=False)
    flat = " ".join(err.split())
    assert code == 2 and out == "" and "3 problems" in flat
    for field in ("trigger.zone", "lateness.policy", "titel"):
        assert f"- {field}: " in flat
    assert "Europe/Paris" in flat
    code, out, _ = await cli(*args, "--json", dsn=db_dsn, home=tmp_path, check=False)
    problems = json.loads(out)
    assert code == 2 and [p["field"] for p in problems] == ["trigger.zone", "lateness.policy", "titel"]
    assert all(set(p) == {"field", "message", "fix"} and p["fix"] for p in problems)
    assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 0
    latin = tmp_path / "latin.toml"
    latin.write_bytes('version = 1\ntitle = "Sch\xe4tzung"\n'.encode("latin-1"))
    code, _, err = await cli("preview", str(latin), dsn=None, home=tmp_path, check=False)
    assert code == 2 and "not UTF-8 text (byte" in err and "Traceback" not in err
    units = tmp_path / "units.txt"
    units.write_text("ppq = 1e-15\n")
    spec = tmp_path / "aq.toml"
    spec.write_text('version = 1\n[trigger]\ntype = "condition"\nmode = "every_edge"\n'
                    'poll_every = "PT1H"\nsource = { name = "aq", version = "1" }\n'
                    '[trigger.predicate]\nsubject = "o3"\nop = ">="\nthreshold = "70 ppq"\n')
    code, _, err = await cli("propose", str(spec), "--tenant", "acme", "--id", "aq", "--owner",
                             "alice", dsn=db_dsn, home=tmp_path, check=False)
    assert code == 2 and "ppq" in err
    os.environ["WATCHKEEPER_UNITS_FILE"] = str(units)
    try:
        await cli("propose", str(spec), "--tenant", "acme", "--id", "aq", "--owner", "alice",
                  dsn=db_dsn, home=tmp_path)
        units.write_text("ppq = 1e-15\nfoo = 3 * nosuchunit\n")
        code, _, err = await cli("list", dsn=db_dsn, home=tmp_path, check=False)
        assert code == 2 and f"{units}:2" in err
    finally:
        os.environ.pop("WATCHKEEPER_UNITS_FILE")


async def test_replay_timeline_keeps_its_columns(db_dsn: str, tmp_path: Path) -> None:
    """The text timeline puts each line's verdict in one column, past the longest
    definition id (the stocks example's 'aapl-first-at-or-below-10' is 25 characters)."""
    _, out, _ = await cli("replay", "--definitions", str(EXAMPLES / "conditions" / "stocks.toml"),
                          "--series", str(EXAMPLES / "series" / "stocks.csv"),
                          dsn=db_dsn, home=tmp_path)
    lines = out.splitlines()
    ids = {"aapl-first-at-or-below-10", "ibm-at-or-above-120", "msft-at-or-above-30"}
    assert {line.split()[1] for line in lines} == ids
    # "<at>  <id padded to the longest> <verdict>": the verdict starts at one offset
    column = len("2000-01-01T00:00:00Z  ") + len("aapl-first-at-or-below-10") + 1
    assert {line[column:].split()[0] for line in lines} == {"true", "false", "-"}
    assert {line[column - 1] for line in lines} == {" "}


async def test_replay_timeline_prints_ids_as_written(db_dsn: str, tmp_path: Path) -> None:
    """An id may hold ':' — "a:smile:b" is printed as written (no emoji), in its column."""
    text = EXAMPLES.joinpath("conditions", "stocks.toml").read_text()
    (tmp_path / "defs.toml").write_text(text.replace('id = "ibm-at-or-above-120"',
                                                     'id = "a:smile:b"'))
    _, out, _ = await cli("replay", "--definitions", str(tmp_path / "defs.toml"), "--series",
                          str(EXAMPLES / "series" / "stocks.csv"), dsn=db_dsn, home=tmp_path)
    lines = [line for line in out.splitlines() if " a:smile:b " in line]
    assert lines  # rich would have printed "a😄b" (and padded the column by the code's width)
    column = len("2000-01-01T00:00:00Z  ") + len("aapl-first-at-or-below-10") + 1
    assert {line[column:].split()[0] for line in lines} <= {"true", "false", "-"}


async def test_sigterm_settles_a_replay(db: Database, db_dsn: str, tmp_path: Path) -> None:
    """SIGTERM in the middle of a replay ends it settled: exit 143, the message says so,
    and its tenant is gone (nothing of it polls or is due any more)."""
    import signal

    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(WATCHKEEPER_HOME=str(tmp_path), DATABASE_URL=db_dsn)
    async with await anyio.open_process(
            [sys.executable, "-m", "watchkeeper", "replay", "--definitions",
             str(EXAMPLES / "conditions" / "stocks.toml"), "--series",
             str(EXAMPLES / "series" / "stocks.csv"), "--json"], env=env) as process:
        assert process.stdout is not None and process.stderr is not None
        with anyio.fail_after(60):
            await process.stdout.receive()  # the replay is running
            process.send_signal(signal.SIGTERM)
            async for _ in process.stdout:
                pass
            err = b"".join([chunk async for chunk in process.stderr]).decode()
            code = await process.wait()
    assert code == 143, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    assert await db.pool.fetchval("SELECT count(*) FROM tenants") == 0


@pytest.mark.parametrize("args", [["--help"], ["list"], ["users", "list"], ["status"],
                                  ["history", "--json"], ["deliveries"],
                                  ["preview", "--every", "60", "--count", "50"]])
async def test_a_closed_stdout_is_a_clean_exit(db: Database, db_dsn: str, tmp_path: Path,
                                               args: list[str]) -> None:
    """Whatever prints the output (rich, typer's help, JSON), a reader that already went
    away is exit 0 without a traceback: the read end is closed before the command
    starts, so every write fails."""
    await cli("users", "add", "acme", "alice", dsn=db_dsn, home=tmp_path)
    read, write = os.pipe()
    os.close(read)
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(WATCHKEEPER_HOME=str(tmp_path), DATABASE_URL=db_dsn)
    try:
        result = await anyio.run_process([sys.executable, "-m", "watchkeeper", *args], env=env,
                                         stdout=write, check=False)
    finally:
        os.close(write)
    err = result.stderr.decode()
    assert result.returncode == 0, err
    assert "Traceback" not in err and "Broken" not in err and "error" not in err


async def test_db_migrate_says_what_it_applied(fresh_dsn: str, tmp_path: Path) -> None:
    """On an empty database, db migrate lists every migration it applied; run again, the
    schema is current; out-of-range ids and instants are exit 2, not a traceback."""
    from watchkeeper.runtime.store._db import migrations

    _, out, _ = await cli("db", "migrate", dsn=fresh_dsn, home=tmp_path)
    assert out.strip() == f"applied {[m.version for m in migrations()]}"
    _, out, _ = await cli("db", "migrate", dsn=fresh_dsn, home=tmp_path)
    assert out.strip() == "schema is current"
    for args in (["report", "99999999999999999999", "--tenant", "a"],
                 ["confirm", "x", "--revision", "99999999999", "--spec-hash", "h"],
                 ["history", "--since", "0001-01-01T00:00:00+14:00"],
                 ["preview", "--every", "60", "--after", "9999-12-31T23:58:00Z"]):
        code, _, err = await cli(*args, dsn=fresh_dsn, home=tmp_path, check=False)
        assert code == 2 and "Traceback" not in err, (args, err)


PY_AGENTS = '''
from watchkeeper import AgentResult, Importance


class Echo:
    async def run(self, ctx):
        return AgentResult(f"# echo\\n\\n{ctx.instructions} (attempt {ctx.attempt})\\n",
                           importance=Importance.HIGH)


class Named(Echo):
    name = "echo"


AGENTS = {"echo": Echo()}
NOT_AGENTS = {"echo": object()}
AGENT_LIST = [Named()]
UNNAMED = [Echo()]


def catalog():
    from watchkeeper.runtime import AgentCatalog
    agents = AgentCatalog()
    agents.add("echo", Echo())
    return agents
'''


async def test_tick_runs_a_python_agent_named_by_agents(db: Database, db_dsn: str,
                                                        tmp_path: Path) -> None:
    """--agents module:attr loads Python agents into the tick's worker: a manual task of a
    definition whose agent is 'echo' completes with the agent's own report; without the
    option no worker has 'echo' and the task is left pending; a module attribute that is
    not a mapping of agents is exit 2 naming --agents."""
    (tmp_path / "myagents.py").write_text(PY_AGENTS)
    spec = tmp_path / "echo.toml"
    spec.write_text('version = 1\ntitle = "Echo"\ninstructions = "Say it back"\n'
                    '[trigger]\ntype = "cron"\nexpr = "0 9 * * 1"\nzone = "UTC"\n'
                    '[agent]\nname = "echo"\n')
    _, out, _ = await cli("users", "add", "acme", "alice", dsn=db_dsn, home=tmp_path)
    token = out.strip().splitlines()[-1]
    _, out, _ = await cli("propose", str(spec), "--tenant", "acme", "--id", "echo", "--owner",
                          "alice", "--json", dsn=db_dsn, home=tmp_path)
    digest = json.loads(out)["spec_hash"]
    await cli("confirm", "echo", "--revision", "1", "--spec-hash", digest, "--token", token,
              dsn=db_dsn, home=tmp_path)
    await cli("trigger", "echo", "--token", token, dsn=db_dsn, home=tmp_path)
    os.environ["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    try:
        _, out, _ = await cli("tick", dsn=db_dsn, home=tmp_path)
        assert json.loads(out)["tasks"] == {}  # nobody here has 'echo'
        code, _, err = await cli("tick", "--agents", "myagents:NOT_AGENTS", dsn=db_dsn,
                                 home=tmp_path, check=False)
        assert code == 2 and "--agents" in err and "'echo' is not a named agent" in err
        _, out, _ = await cli("tick", "--agents", "myagents:AGENTS", dsn=db_dsn, home=tmp_path)
        assert json.loads(out)["tasks"] == {"completed": 1}
        code, _, err = await cli("tick", "--agents", "myagents:UNNAMED", dsn=db_dsn,
                                 home=tmp_path, check=False)
        assert code == 2 and "--agents" in err and "Echo has no name" in err
        for target in ("myagents:AGENT_LIST", "myagents:catalog"):  # a list, an AgentCatalog
            await cli("trigger", "echo", "--token", token, dsn=db_dsn, home=tmp_path)
            _, more, _ = await cli("tick", "--agents", target, dsn=db_dsn, home=tmp_path)
            assert json.loads(more)["tasks"] == {"completed": 1}, target
    finally:
        os.environ["PYTHONPATH"] = os.environ["PYTHONPATH"].split(os.pathsep, 1)[1]
    report = await db.pool.fetchrow("SELECT content_md, importance FROM reports ORDER BY task_id "
                                    "LIMIT 1")
    assert (report["content_md"], report["importance"]) == (
        "# echo\n\nSay it back (attempt 1)\n", "high")
    assert await db.pool.fetchval("SELECT count(*) FROM reports") == 3
