"""`air-data pack SRC DST`: a volume folder of small files into Parquet shards, with a progress bar."""

from __future__ import annotations

import argparse

from ..errors import OptionError
from ..sizes import MEANING


def add_pack_command(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Add the `pack` subcommand to `air-data`'s subparsers; returns its parser."""
    p = subparsers.add_parser(
        "pack", help="pack a volume folder of small files into large Parquet shards (resumable, once per change)",
        description="Pack the files under SRC into Parquet shards under DST, a row per file (path, size, mtime, "
                    "bytes, and label when files sit in class folders), published atomically: readers of DST see "
                    "the previous pack or the new one, never half of one. Packing an unchanged SRC writes nothing; "
                    "a killed run, run again, keeps the shards it finished. Every air front door reads DST as the "
                    "loose files; any Parquet reader reads its shards. Records that name media (--media, or "
                    "Hugging Face's folder layout) are packed a row per record, with their media's bytes, and read "
                    "as the records' rows.")
    p.add_argument("src", help="volume folder of files to pack, /Volumes/<catalog>/<schema>/<volume>/...")
    p.add_argument("dst", help="volume folder to publish the pack at (new, empty, or an earlier pack's)")
    p.add_argument("--shard-size", default="1GiB", help=f"about how big each shard is (default 1GiB; {MEANING})")
    p.add_argument("--row-group-size", default="16MiB",
                   help="about how many bytes of files each row group holds (default 16MiB)")
    p.add_argument("--include", action="append", help="glob of files to pack, relative to SRC (repeatable)")
    p.add_argument("--exclude", action="append", help="glob of files to leave out (repeatable)")
    p.add_argument("-j", "--jobs", type=int, default=64, help="files read at once (default 64)")
    p.add_argument("--media", action="append", metavar="COLUMN=KIND",
                   help="SRC holds records that name media: a column of paths and its kind (image, audio, video or "
                        "file), as media= takes them (repeatable); each record is packed with its media's bytes. "
                        "Hugging Face's folder layout (metadata.jsonl beside the media) is packed so without it")
    p.add_argument("--media-dir", help="the folder the media paths are relative to: a volume path, or a path "
                                       "relative to SRC (default: each records file's own folder)")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="a record whose medium is missing: fail (raise, the default), or leave it out with a "
                        "warning (skip)")
    p.set_defaults(func=run_pack)
    return p


def media_option(given: list[str] | None) -> dict[str, str] | None:
    """`--media COLUMN=KIND ...` as media= takes it.

    Raises:
        OptionError: one is not COLUMN=KIND.
    """
    if given is None:
        return None
    out = {}
    for item in given:
        column, eq, kind = item.partition("=")
        if not eq or not column or not kind:
            raise OptionError(f"--media {item!r}: give a column of paths and its kind, such as --media image=image")
        out[column] = kind
    return out


def run_pack(args: argparse.Namespace) -> None:
    """Run `pack` with parsed arguments; prints one summary line."""
    from ..packing import pack

    r = pack(args.src, args.dst, shard_size=args.shard_size, row_group_size=args.row_group_size,
             include=args.include, exclude=args.exclude, threads=args.jobs, progress=True,
             media=media_option(args.media), media_dir=args.media_dir, on_error=args.on_error)
    if r.skipped:
        print(f"{r.dest} already holds the pack of {args.src} as it is now: nothing written")
    else:
        kept = len(r.shards) - r.written
        what = f"{r.files} records with their media" if r.records else f"{r.files} files"
        print(f"packed {what} ({r.bytes / 1e6:.1f} MB) into {len(r.shards)} shards at {r.path}"
              + (f" ({kept} kept from an interrupted run)" if kept else "")
              + (f"; left out {len(r.left_out)} records whose media cannot be read" if r.left_out else ""))
