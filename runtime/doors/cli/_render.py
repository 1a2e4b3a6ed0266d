"""Rich tables for the CLI. Nothing here decides anything."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table
from rich.text import Text

from watchkeeper.triggers import format_utc

if TYPE_CHECKING:
    from watchkeeper.runtime.usecases import HistoryEntry, HistoryEvent
    from watchkeeper.triggers import PreviewItem

__all__ = ["definitions_table", "history_lines", "history_table", "preview_table", "utc_text"]


def _utc(value: datetime | None) -> str:
    return "" if value is None else format_utc(value).replace("T", " ")


def utc_text(value: datetime | None) -> str:
    """An instant as ISO 8601 UTC ending in Z, or ``-`` for none."""
    return "-" if value is None else format_utc(value)


def preview_table(items: Sequence[PreviewItem], title: str) -> Table:
    """Next occurrences: UTC instant, local time with offset, slot key, note."""
    table = Table(title=title, show_lines=False)
    for name in ("#", "scheduled_for (UTC)", "local", "slot", "note"):
        table.add_column(name, overflow="fold")
    for index, item in enumerate(items, 1):
        runs = "" if item.slot.fires else " [skipped]"
        table.add_row(str(index), _utc(item.slot.scheduled_for),
                      item.slot.local.isoformat() + runs, item.slot.key, item.note or "")
    return table


def definitions_table(rows: Iterable[Mapping[str, Any]]) -> Table:
    """One line per definition."""
    table = Table(title="definitions")
    for name in ("tenant", "id", "origin", "status", "rev (eff/latest)", "trigger",
                 "next due (UTC)", "slots seen", "title"):
        table.add_column(name, overflow="fold")
    for r in rows:
        trigger = r["trigger"] or {}
        what = trigger.get("expr") or trigger.get("every") or trigger.get("at") or ""
        zone = trigger.get("zone") or ""
        table.add_row(*(Text(cell) for cell in (
            r["tenant_id"], r["definition_id"], r["origin"], r["status"],
            f"{r['effective_revision'] or '-'}/{r['latest_revision']}",
            f"{trigger.get('type', '')} {what} {zone}".strip(),
            _utc(r["next_due_at"]), str(r["slots_seen"]), r["title"] or "")))
    return table


def history_table(entries: Sequence[HistoryEntry], events: Sequence[HistoryEvent],
                  title: str) -> Table:
    """The six facts per occurrence, oldest first, with ranges and other events.

    Readable in 100 columns: the essential columns (when in UTC and local, definition
    and kind, decision and admission lateness, task) never wrap; the details (slot,
    reason, runs, receipt, notices, next step) fold in the last column, one fact a
    line."""
    table = Table(title=title, box=box.SIMPLE_HEAD, show_lines=True, pad_edge=False,
                  collapse_padding=True)
    for name in ("scheduled (UTC)\nlocal", "definition\nkind",
                 "decision\nadmission lateness", "task"):
        table.add_column(name, no_wrap=True)
    table.add_column("details", overflow="fold", ratio=1, min_width=24)
    rows: list[tuple[datetime, list[str]]] = []
    for e in entries:
        rows.append((e["scheduled_for"], _entry_cells(e)))
    for ev in events:
        r = ev.row
        when = r["last_at"] or r["recorded_at"]
        span = r["first_slot"] if r["count"] <= 1 else f"{r['first_slot']} .. {r['last_slot']}"
        rows.append((when, [_when(when), f"{r['definition_id']}\nrange", r["kind"], "",
                            f"slots {span} ({r['count']})\n{r['reason']}"]))
    for _, cells in sorted(rows, key=lambda item: item[0]):
        table.add_row(*(Text(cell) for cell in cells))  # text, never markup: agents wrote it
    return table


def _when(instant: datetime, local: str | None = None) -> str:
    """An instant as UTC to the minute (to the second when it has seconds), and below
    it the local time with its offset (the date too when it differs)."""
    clock = "%H:%M:%S" if instant.second or instant.microsecond else "%H:%M"
    utc = instant.astimezone(UTC)
    text = utc.strftime(f"%Y-%m-%d {clock}")
    if local:
        there = datetime.fromisoformat(local)
        day = "" if there.date() == utc.date() else "%m-%d "
        offset = there.strftime("%z")
        text += "\n" + there.strftime(f"{day}{clock} ") + f"{offset[:3]}:{offset[3:]}"
    return text


def _entry_cells(e: HistoryEntry) -> list[str]:
    from watchkeeper.triggers import USER_BINDING_ID  # not at import: it loads the spec

    task = "" if e["task_id"] is None else f"#{e['task_id']}\n{e['task_status']}"
    if e["run_status"]:
        task = f"run\n{e['run_status']}"
    kind = e["kind"] if e["binding_id"] == USER_BINDING_ID else f"{e['kind']}\n{e['binding_id']}"
    details = [f"slot {e['slot']}"]
    if e["decision"] != "admitted" or e["kind"] == "manual":
        details.append(str(e["reason"]))
    details += [f"run {_run_cell(u)}" for u in (e["runs"] or [])]
    if e["content_sha256"]:
        details.append(f"report {'verified' if e['verified'] else 'NOT verified'} "
                       f"{e['content_sha256'][:10]}")
    if e["deliveries"]:
        details.append("notices " + ", ".join(f"{d['channel']} {d['status']} x{d['attempts']}"
                                              for d in e["deliveries"]))
    if e.next_step:
        details.append(f"next: {e.next_step}")
    return [_when(e["scheduled_for"], e["local"]), f"{e['definition_id']}\n{kind}",
            f"{e['decision']}\n{e['admission_lateness_seconds']:.1f} s"
            + (", late" if e["late"] else ""), task, "\n".join(details)]


def _run_cell(u: dict[str, Any]) -> str:
    """One run in the history table: attempt, root, outcome, token, model and spending,
    the continuation intent it ended with, and its error."""
    text = f"{u['attempt']}:{u['outcome']}(fencing token {u['lease_token']}"
    if (u.get("root") or 1) > 1:
        text += f", root {u['root']}"
    text += ")"
    spent = u.get("usage") or {}
    if u.get("model") or spent.get("model_requests"):
        text += (f" {u.get('model') or 'model'}: {spent.get('model_requests', 0)} req, "
                 f"{len(u.get('tool_calls') or [])} tool, {spent.get('cost_usd', '0')} USD")
    intent = u.get("continuation")
    if intent:
        text += (f" continuation {intent.get('status')}: {str(intent.get('reason'))[:60]}"
                 + (f" ({intent['refusal']})" if intent.get("refusal") else ""))
    if u.get("error"):
        text += f" {str(u['error'])[:80]}"
    return text


def history_lines(entries: Sequence[HistoryEntry], events: Sequence[HistoryEvent]) -> list[str]:
    """The six facts per occurrence as one readable line each, oldest first."""
    lines: list[tuple[datetime, str]] = []
    for e in entries:
        facts = [f"{e['decision']}" + (f" ({e['reason']})" if e["decision"] != "admitted" else ""),
                 f"admission lateness {e['admission_lateness_seconds']:.1f} s"
                 + (" (late)" if e["late"] else "")]
        if e["task_id"] is not None:
            runs = e["runs"] or []
            facts.append(f"task #{e['task_id']} {e['task_status']}, {len(runs)} run(s)"
                         + (f" (fencing tokens {', '.join(str(u['lease_token']) for u in runs)})"
                            if runs else ""))
        if e["content_sha256"]:
            facts.append(f"report {'verified' if e['verified'] else 'NOT verified'} "
                         f"{e['content_sha256'][:10]}")
        if e["deliveries"]:
            facts.append("notices " + ", ".join(
                f"{d['channel']} {d['status']} after {d['attempts']} attempt(s)"
                for d in e["deliveries"]))
        if e.next_step:
            facts.append(f"next: {e.next_step}")
        lines.append((e["scheduled_for"], f"{_utc(e['scheduled_for'])}  {e['kind']:9} "
                                          f"{e['slot']}\n    " + "; ".join(facts)))
    for ev in events:
        r = ev.row
        when = r["last_at"] or r["recorded_at"]
        span = r["first_slot"] if r["count"] <= 1 else f"{r['first_slot']} .. {r['last_slot']}"
        lines.append((when, f"{_utc(when)}  {r['kind']}: {span} ({r['count']}): {r['reason']}"))
    return [text for _, text in sorted(lines, key=lambda item: item[0])]
