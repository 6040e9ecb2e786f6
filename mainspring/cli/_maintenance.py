"""The maintenance commands: ``migrate`` (an older store to the current layout, the old one
kept; a PostgreSQL schema upgraded in place) and ``prune`` (finished executions older than a
duration, through the runtime)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..storage import MigrationError, StorageError, StoreInUse, migrate_store
from ..storage._seam import redact_url
from ._codes import EXIT_BUSY, EXIT_FAILED, EXIT_NO_STORE, EXIT_OK, CliError
from ._output import Out, clamp

if TYPE_CHECKING:  # migrate does not load the execution layer
    from ..executions import Runtime


def run_migrate(path: Path | str, out: Out) -> int:
    """``mainspring migrate``: 0 migrated (or already current), 1 if some records did not
    read (they stay in the backup), 4 if the store is in use, 5 if there is no store."""
    try:
        report = migrate_store(path)
    except StoreInUse as exc:
        raise CliError(str(exc), EXIT_BUSY) from None
    except MigrationError as exc:
        raise CliError(f"not migrated: {exc}", EXIT_FAILED) from None
    except (StorageError, OSError) as exc:
        shown = redact_url(path) if isinstance(path, str) else path
        raise CliError(f"cannot migrate {shown}: {exc}", EXIT_NO_STORE) from None
    problems = [{"id": p.id, "error": p.error} for p in report.problems]
    if out.as_json:
        out.data(
            {
                "store": str(report.new_path),
                "kind": report.kind,
                "status": "current" if report.already_current else "migrated",
                "migrated": report.migrated,
                "backup": str(report.backup_path) if report.backup_path else None,
                "problems": problems,
                "from_layout": report.from_layout,
            }
        )
    elif report.already_current:
        out.line(
            f"{report.new_path} is already current (storage layout {report.to_layout}): "
            "nothing changed"
        )
    elif report.kind == "postgres":
        out.line(
            f"{report.new_path}: schema upgraded to storage layout {report.to_layout}; "
            f"{report.migrated} executions read"
        )
    else:
        old = "0.1" if report.from_layout == 1 else f"v{report.from_layout}"
        out.line(
            f"{report.new_path}: {report.migrated} executions migrated to storage layout "
            f"{report.to_layout}; the {old} store is kept at {report.backup_path}"
        )
        for problem in report.problems:
            error = clamp(problem.error, 500)
            out.line(f"  not migrated (it stays in the backup): {problem.id}: {error}")
    return EXIT_FAILED if report.problems else EXIT_OK


async def run_prune(rt: Runtime, out: Out, args: argparse.Namespace) -> int:
    """``mainspring prune``: what was deleted (or would be, with ``--dry-run``)."""
    options = {"statuses": tuple(args.statuses)} if args.statuses else {}
    report = await rt.prune(older_than=args.older_than, dry_run=args.dry_run, **options)
    if out.as_json:
        out.data(
            {
                "dry_run": report.dry_run,
                "deleted": list(report.deleted),
                "skipped": [{"id": s.id, "reason": s.reason} for s in report.skipped],
            }
        )
        return EXIT_OK
    verb = "would delete" if report.dry_run else "deleted"
    for execution_id in report.deleted:
        out.line(f"{verb} {execution_id}")
    for skip in report.skipped:
        out.line(f"kept {skip.id}: {clamp(skip.reason, 300)}")
    count = len(report.deleted)
    if report.dry_run:
        out.line(f"{count} would be deleted (dry run: nothing was deleted)")
    else:
        out.line(f"{count} deleted")
    return EXIT_OK
