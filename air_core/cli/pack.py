"""`air-data pack SRC DST`: a volume folder of small files into Parquet shards, with a progress bar."""

from __future__ import annotations

import argparse

from ..sizes import MEANING


def add_pack_command(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Add the `pack` subcommand to `air-data`'s subparsers; returns its parser."""
    p = subparsers.add_parser(
        "pack", help="pack a volume folder of small files into large Parquet shards (resumable, once per change)",
        description="Pack the files under SRC into Parquet shards under DST, a row per file (path, size, mtime, "
                    "bytes, and label when files sit in class folders), published atomically: readers of DST see "
                    "the previous pack or the new one, never half of one. Packing an unchanged SRC writes nothing; "
                    "a killed run, run again, keeps the shards it finished. Every air front door reads DST as the "
                    "loose files; any Parquet reader reads its shards.")
    p.add_argument("src", help="volume folder of files to pack, /Volumes/<catalog>/<schema>/<volume>/...")
    p.add_argument("dst", help="volume folder to publish the pack at (new, empty, or an earlier pack's)")
    p.add_argument("--shard-size", default="1GiB", help=f"about how big each shard is (default 1GiB; {MEANING})")
    p.add_argument("--row-group-size", default="16MiB",
                   help="about how many bytes of files each row group holds (default 16MiB)")
    p.add_argument("--include", action="append", help="glob of files to pack, relative to SRC (repeatable)")
    p.add_argument("--exclude", action="append", help="glob of files to leave out (repeatable)")
    p.add_argument("-j", "--jobs", type=int, default=64, help="files read at once (default 64)")
    p.set_defaults(func=run_pack)
    return p


def run_pack(args: argparse.Namespace) -> None:
    """Run `pack` with parsed arguments; prints one summary line."""
    from ..packs.write import pack

    r = pack(args.src, args.dst, shard_size=args.shard_size, row_group_size=args.row_group_size,
             include=args.include, exclude=args.exclude, threads=args.jobs, progress=True)
    if r.skipped:
        print(f"{r.dest} already holds the pack of {args.src} as it is now: nothing written")
    else:
        kept = len(r.shards) - r.written
        print(f"packed {r.files} files ({r.bytes / 1e6:.1f} MB) into {len(r.shards)} shards at {r.path}"
              + (f" ({kept} kept from an interrupted run)" if kept else ""))
