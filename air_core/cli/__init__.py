"""The `air-data` command: demo, stage, export-delta, cache, pack."""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time

from tqdm import tqdm

from .delta import add_export_delta_command
from .pack import add_pack_command
from ..errors import AirError, OptionError
from ..sizes import MEANING, parse_size


def _demo(args: argparse.Namespace) -> None:
    from .demo import main

    if args.workdir:
        main(args.workdir, world_size=args.world_size, num_workers=args.num_workers)
    else:
        with tempfile.TemporaryDirectory(prefix="air-demo-") as d:
            main(d, world_size=args.world_size, num_workers=args.num_workers)


def _stage(args: argparse.Namespace) -> None:
    from ..io.listing import list_folder
    from ..io.stage import stage

    total = int(list_folder(args.src, include=args.include, exclude=args.exclude).sizes.sum())
    with tqdm(total=total, unit="B", unit_scale=True, desc="stage") as bar:
        result = stage(args.src, args.dst, threads=args.jobs, include=args.include, exclude=args.exclude,
                       on_file=bar.update)
    print(f"copied {result.copied} files ({result.bytes / 1e6:.1f} MB), {result.skipped} already up to date")


_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def size(text: str) -> int:
    """Bytes from `500M`, `10G`, `1GiB`, `2GB`, `4096` (see `air_core.sizes`)."""
    try:
        return parse_size(text)
    except OptionError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def duration(text: str) -> float:
    """Seconds from `90s`, `30m`, `12h`, `7d`."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: give e.g. 30m, 12h or 7d")
    return float(m.group(1)) * _SECONDS[m.group(2)]


def _verify(cache, repair: bool) -> int:
    """Report (and with `repair` remove) damaged entries; 1 when damage is left in place, as `cmp` and `fsck` do."""
    r = cache.check(repair=repair)
    for path in r.damaged:
        print(f"damaged: {path}" + (" (removed)" if repair else ""))
    print(f"checked {r.entries - r.unchecked} of {r.entries} entries ({r.bytes / 1e9:.3f} GB): {len(r.damaged)} "
          f"damaged" + (", removed" if repair and r.damaged else "") +
          (f"; {r.unchecked} have no checksum (copied by an older version, or on a file system without "
           "extended attributes)" if r.unchecked else ""))
    return 1 if r.damaged and not repair else 0


def _cache(args: argparse.Namespace) -> int | None:
    from ..io.cache import Cache, default_dir

    root = os.path.abspath(args.cache_dir or default_dir())
    if not os.path.isdir(os.path.join(root, "objects")):  # never make, nor empty, a folder that is no cache
        raise OptionError(f"{root} holds no node cache (no objects/ folder): give the folder with --cache-dir, "
                          "or set AIR_CACHE_DIR")
    cache = Cache(root, limit_bytes=getattr(args, "limit", None))  # refuses another user's folder
    if args.action == "info":
        i = cache.info()
        used = "never" if i["oldest_use"] is None else f"{(time.time() - i['oldest_use']) / 3600:.1f} h ago"
        print(f"folder: {i['folder']}\nentries: {i['entries']}\nsize: {i['bytes'] / 1e9:.3f} GB\n"
              f"oldest use: {used}\ndisk free: {i['disk_free_bytes'] / 1e9:.1f} GB\n"
              f"damaged copies found: {i['damaged']} (removed and fetched again)\n"
              "hits and misses are counted per process (CacheStats), not kept here")
    elif args.action == "prune":
        if args.older_than is None and args.limit is None:
            raise OptionError("prune needs --older-than (e.g. 7d) or --limit (e.g. 100G): what should go?")
        print(f"freed {cache.prune(older_than=args.older_than) / 1e9:.3f} GB "
              "(entries used in the last hour are kept)")
    elif args.action == "verify":
        return _verify(cache, args.repair)
    else:
        print(f"freed {cache.clear() / 1e9:.3f} GB")


def parser() -> argparse.ArgumentParser:
    """The argument parser of `air-data`."""
    p = argparse.ArgumentParser(prog="air-data", description="Unity Catalog volume loaders.")
    sub = p.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="build a small local volume and stream it through every front door")
    demo.add_argument("--workdir", help="keep the demo volume and cache here (default: a temp folder)")
    demo.add_argument("--world-size", type=int, default=2, help="ranks of the split to show")
    demo.add_argument("--num-workers", type=int, default=2, help="DataLoader workers of the split to show")
    demo.set_defaults(func=_demo)

    st = sub.add_parser("stage", help="copy a volume folder to local disk in parallel")
    st.add_argument("src", help="volume folder, /Volumes/<catalog>/<schema>/<volume>/...")
    st.add_argument("dst", help="local destination folder")
    st.add_argument("-j", "--jobs", type=int, default=64, help="concurrent copies (default 64)")
    st.add_argument("--include", help="glob of files to copy, relative to SRC")
    st.add_argument("--exclude", help="glob of files to leave out")
    st.set_defaults(func=_stage)

    add_export_delta_command(sub)

    cache = sub.add_parser("cache", help="what the node cache holds; prune, clear or verify it")
    actions = cache.add_subparsers(dest="action", required=True)
    for name, text in (("info", "folder, entries, size, oldest use, free disk, damaged copies found"),
                       ("prune", "remove entries unused for a while, or down to a size (spares the last hour's)"),
                       ("clear", "remove every entry and saved listing (stop running jobs first)"),
                       ("verify", "hash every entry against the checksum recorded when it was copied")):
        a = actions.add_parser(name, help=text)
        a.add_argument("--cache-dir", help="the cache folder (default: $AIR_CACHE_DIR, then /local_disk0/..., "
                                           "then a per-user temp folder)")
        if name == "verify":
            a.add_argument("--repair", action="store_true", help="remove the damaged entries (read again, they "
                                                                 "are fetched again)")
        if name == "prune":
            a.add_argument("--older-than", type=duration, help="remove entries unused for this long (e.g. 7d)")
            a.add_argument("--limit", type=size, help="then remove the least recently used down to this size "
                           f"(e.g. 100G; {MEANING})")
        a.set_defaults(func=_cache)
    add_pack_command(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except AirError as e:
        print(f"air-data {args.command}: {e}", file=sys.stderr)
        return 2
