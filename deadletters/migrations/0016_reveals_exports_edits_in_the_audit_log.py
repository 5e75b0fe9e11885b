"""Reveals (deadletters.Reveal) and exports (deadletters.Export) move into the one audit log
(jobqueue.AuditEntry) as letter.reveal and letters.export entries, and every payload edit and
every replay run's start gets the entry the code now writes with it (letter.edit_replay,
letters.replay or letters.discard) where it has none: appended to the chain oldest first after
what is there, as 0014 appended the runs' events, so nothing is lost and `audit verify` passes.
Their channel was not recorded. Then Reveal and Export are dropped; the reveal permission
(view_secrets, which Reveal held) moves to ReplayRun with its grants."""

from django.db import migrations

# As deadletters.edits.changed_paths lists them, frozen here.
PATH_CHARS = 200
MAX_PATHS = 50
MAX_DEPTH = 64
_GONE = object()


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and a == b
    except RecursionError:
        return False


def changed_paths(old_args, old_kwargs, new_args, new_kwargs):
    paths = []
    todo = [(new_kwargs, old_kwargs, "kwargs", 1), (new_args, old_args, "args", 1)]
    while todo:
        new, old, where, depth = todo.pop()
        if _same(new, old):
            continue
        if depth < MAX_DEPTH and isinstance(new, dict) and isinstance(old, dict):
            keys = [*new, *(key for key in old if key not in new)]
            todo.extend(
                (new.get(key, _GONE), old.get(key, _GONE), f"{where}[{key!r}]", depth + 1)
                for key in reversed(keys)
            )
        elif (
            depth < MAX_DEPTH
            and isinstance(new, list)
            and isinstance(old, list)
            and len(new) == len(old)
        ):
            todo.extend(
                (new[n], old[n], f"{where}[{n}]", depth + 1) for n in reversed(range(len(new)))
            )
        else:
            paths.append(where if len(where) <= PATH_CHARS else where[: PATH_CHARS - 1] + "…")
    return paths[:MAX_PATHS], len(paths)


def _recorded(AuditEntry, db, action, key) -> set:
    """The `key` parameter of every entry of `action` already in the log."""
    found = set()
    for params in (
        AuditEntry.objects.using(db).filter(action=action).values_list("params", flat=True)
    ):
        if isinstance(params, dict) and params.get(key) is not None:
            found.add(params[key])
    return found


def _old_rows(apps, db):
    """(at, kind order, id, action, target kind, targets, actor, reason, params) of each row
    to move in, oldest first."""
    Reveal = apps.get_model("deadletters", "Reveal")
    Export = apps.get_model("deadletters", "Export")
    PayloadEdit = apps.get_model("deadletters", "PayloadEdit")
    ReplayRun = apps.get_model("deadletters", "ReplayRun")
    AuditEntry = apps.get_model("jobqueue", "AuditEntry")
    rows = []
    for r in Reveal.objects.using(db).order_by("at", "id").iterator():
        params = {"via": r.via, "task_path": r.task_path}
        rows.append(
            (
                r.at,
                0,
                r.id,
                "letter.reveal",
                "letter",
                [r.dead_letter_id],
                r.operator_name,
                "",
                params,
            )
        )
    for e in Export.objects.using(db).order_by("at", "id").iterator():
        params = {"filter": e.filter, "format": e.format, "rows": e.rows, "truncated": e.truncated}
        rows.append((e.at, 1, e.id, "letters.export", "letters", [], e.operator_name, "", params))
    # An edit's one-item run is recorded by the edit's entry, not as a run's start.
    edit_runs = {}
    for run_id, recorded in ReplayRun.objects.using(db).values_list("id", "filter").iterator():
        if isinstance(recorded, dict) and isinstance(recorded.get("payload_edit"), int):
            edit_runs[recorded["payload_edit"]] = run_id
    edits_in = _recorded(AuditEntry, db, "letter.edit_replay", "edit")
    for edit in PayloadEdit.objects.using(db).order_by("at", "id").iterator():
        if edit.pk in edits_in:
            continue
        paths, changed = changed_paths(
            edit.old_args, edit.old_kwargs, edit.new_args, edit.new_kwargs
        )
        params = {"edit": edit.pk, "job": edit.job_id, "changed": paths}
        if edit.pk in edit_runs:
            params["run"] = edit_runs[edit.pk]
        if changed > len(paths):
            params["changed_more"] = changed - len(paths)
        rows.append(
            (
                edit.at,
                2,
                edit.id,
                "letter.edit_replay",
                "letter",
                [edit.dead_letter_id],
                edit.operator_name,
                edit.reason,
                params,
            )
        )
    started = _recorded(AuditEntry, db, "letters.replay", "run") | _recorded(
        AuditEntry, db, "letters.discard", "run"
    )
    made_by_edits = set(edit_runs.values())
    for run in ReplayRun.objects.using(db).order_by("created_at", "id").iterator():
        if run.pk in started or run.pk in made_by_edits:
            continue
        params = {
            "run": run.pk,
            "count": run.requested,
            "allow_poisoned": run.allow_poisoned,
            "rate": run.rate,
            "filter": run.filter,
        }
        if run.canary_size:
            params["canary"] = {
                "size": run.canary_size,
                "max_dead_share": run.canary_max_dead_share,
                "timeout": run.canary_timeout,
            }
        if run.state == "awaiting" or run.approved_by:
            params["awaiting_approval"] = True
        rows.append(
            (
                run.created_at,
                3,
                run.id,
                f"letters.{run.action}",
                "selection",
                [run.selection_id],
                run.operator_name,
                run.reason,
                params,
            )
        )
    rows.sort(key=lambda r: r[:3])
    return rows


def move_in(apps, schema_editor):
    from jobqueue.store.audit import GENESIS, entry_hash

    db = schema_editor.connection.alias
    AuditEntry = apps.get_model("jobqueue", "AuditEntry")
    AuditTarget = apps.get_model("jobqueue", "AuditTarget")
    AuditChain = apps.get_model("jobqueue", "AuditChain")
    rows = _old_rows(apps, db)
    if not rows:
        return
    head = AuditChain.objects.using(db).filter(pk=1).first()
    seq, prev = (head.seq, head.hash) if head else (0, GENESIS)
    for at, _, _, action, kind, targets, actor, reason, params in rows:
        seq += 1
        entry = AuditEntry(
            seq=seq,
            at=at,
            actor=actor,
            channel="unrecorded",
            token="",
            action=action,
            target_kind=kind,
            targets=[str(t) for t in targets],
            reason=reason,
            params=params,
            outcome="done",
            prev_hash=prev,
        )
        entry.hash = prev = entry_hash(entry)
        entry.save(using=db)
        AuditTarget.objects.using(db).bulk_create(
            AuditTarget(entry=entry, kind=kind, ref=ref) for ref in entry.targets
        )
    AuditChain.objects.using(db).update_or_create(pk=1, defaults={"seq": seq, "hash": prev})


def move_permission(apps, schema_editor):
    """view_secrets, and who holds it, to ReplayRun's content type; the dropped models' own
    permissions and content types go (as remove_stale_contenttypes would remove them)."""
    db = schema_editor.connection.alias
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    stale = ContentType.objects.using(db).filter(
        app_label="deadletters", model__in=["reveal", "export"]
    )
    old = (
        Permission.objects.using(db).filter(content_type__in=stale, codename="view_secrets").first()
    )
    if old is not None:
        run_type, _ = ContentType.objects.using(db).get_or_create(
            app_label="deadletters", model="replayrun"
        )
        new = (
            Permission.objects.using(db)
            .filter(content_type=run_type, codename="view_secrets")
            .first()
        )
        if new is None:
            old.content_type = run_type
            old.save(using=db)
        else:
            new.group_set.add(*old.group_set.all())
            new.user_set.add(*old.user_set.all())
    stale.delete()


class Migration(migrations.Migration):
    dependencies = [
        ("deadletters", "0015_one_selection"),
        ("jobqueue", "0021_audit_log"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.RunPython(move_in, migrations.RunPython.noop),
        migrations.RunPython(move_permission, migrations.RunPython.noop),
        migrations.RemoveField(model_name="reveal", name="dead_letter"),
        migrations.RemoveField(model_name="reveal", name="operator"),
        migrations.AlterModelOptions(
            name="replayrun",
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [
                    ("view_deadletter", "Can browse dead letters"),
                    ("replay_deadletter", "Can replay dead letters"),
                    ("discard_deadletter", "Can discard dead letters"),
                    ("replay_poisoned", "Can replay items past the poison limit"),
                    (
                        "edit_deadletter",
                        "Can edit a dead letter's payload and replay it (audited)",
                    ),
                    ("export_deadletter", "Can export dead letters (audited)"),
                    ("view_secrets", "Can see dead-letter payloads unmasked (audited)"),
                ],
            },
        ),
        migrations.DeleteModel(name="Export"),
        migrations.DeleteModel(name="Reveal"),
    ]
