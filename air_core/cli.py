"""The `air-data` command: demo, stage, export-delta, pack."""

from __future__ import annotations

import argparse
import sys
import tempfile

from tqdm import tqdm

from .cli_delta import add_export_delta_command
from .cli_pack import add_pack_command
from .errors import AirError


def _demo(args: argparse.Namespace) -> None:
    from .demo import main

    if args.workdir:
        main(args.workdir, world_size=args.world_size, num_workers=args.num_workers)
    else:
        with tempfile.TemporaryDirectory(prefix="air-demo-") as d:
            main(d, world_size=args.world_size, num_workers=args.num_workers)


def _stage(args: argparse.Namespace) -> None:
    from .manifest import list_folder
    from .stage import stage

    total = int(list_folder(args.src, include=args.include, exclude=args.exclude).sizes.sum())
    with tqdm(total=total, unit="B", unit_scale=True, desc="stage") as bar:
        result = stage(args.src, args.dst, threads=args.jobs, include=args.include, exclude=args.exclude,
                       on_file=bar.update)
    print(f"copied {result.copied} files ({result.bytes / 1e6:.1f} MB), {result.skipped} already up to date")


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
    add_pack_command(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        args.func(args)
    except AirError as e:
        print(f"air-data {args.command}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
