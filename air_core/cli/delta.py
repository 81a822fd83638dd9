"""`air-data export-delta TABLE DEST`: a Delta table to Parquet on a volume, with a progress bar."""

from __future__ import annotations

import argparse


def add_export_delta_command(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Add the `export-delta` subcommand to `air-data`'s subparsers; returns its parser."""
    p = subparsers.add_parser(
        "export-delta", help="export a Delta table as Parquet files on a volume (atomic, once per version)",
        description="Export a Delta table (read through its log with deltalake, no Spark) as Parquet files "
                    "under DEST, published atomically: readers of DEST see the previous export or the new one, "
                    "never half of one. Exporting a version DEST already holds writes nothing.")
    p.add_argument("table", help="the Delta table: a volume path (/Volumes/...), a local path or a URI")
    p.add_argument("dest", help="volume folder to publish the export at, /Volumes/<catalog>/<schema>/<volume>/...")
    p.add_argument("--version", type=int, help="table version to export (default: the latest)")
    p.add_argument("--rows-per-file", type=int, help="rows per Parquet file (default: eight row groups)")
    p.add_argument("--rows-per-row-group", type=int,
                   help="rows per row group (default: about 16 MiB of the table's data)")
    p.set_defaults(func=run_export_delta)
    return p


def run_export_delta(args: argparse.Namespace) -> None:
    """Run `export-delta` with parsed arguments; prints one summary line."""
    from ..delta import export_delta

    r = export_delta(args.table, args.dest, version=args.version, rows_per_file=args.rows_per_file,
                     rows_per_row_group=args.rows_per_row_group, progress=True)
    if r.skipped:
        print(f"{r.dest} already holds version {r.version} of {r.table}: nothing written")
    else:
        print(f"exported version {r.version} of {r.table}: {r.rows} rows in {len(r.files)} files at {r.path}")
