"""The benchmarks both trees have, on this code and on an earlier revision's, in turn, in one run.

A change meant to leave speed alone (a restructuring) is checked by running
the revision before it beside this code: the revision is checked out into a
temporary worktree, and each benchmark runs as that tree's own script on its
own code (`PYTHONPATH` its tree), then as this tree's on this code, or the
other way round (the order alternates from one benchmark to the next), on the
same data, under one netvol build (this tree's). Both trees' lines go to
`results/before_after/{before,after}/<name>.jsonl` (a later run replaces the
benchmarks it runs and keeps the others, each with its two revisions in
`revisions.json`); this code's lines are also the benchmark's results
(`results/<name>.jsonl`), and `render.py` shows the headline figures of both
side by side in RESULTS.md.

Usage: TMPDIR=/dev/shm python benchmarks/before_after.py --rev REV [--only core,torch,...]
"""

from __future__ import annotations

import argparse
import json
import shutil

from run_all import BENCHES, HERE, RESULTS, run

from common import REPO, checked_out, netvol_so, short_sha

COMPARED = RESULTS / "before_after"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rev", required=True, help="the revision before the change")
    p.add_argument("--only", help="comma-separated subset of the benchmarks both trees have")
    args = p.parse_args()
    sha = {rev: short_sha(rev) for rev in (args.rev, "HEAD")}
    with checked_out(args.rev) as before:
        names = [n for n in (args.only.split(",") if args.only else BENCHES)
                 if (before / "benchmarks" / BENCHES[n][0]).exists()]
        netvol_so()  # built from this tree before either runs, then used by both
        record = COMPARED / "revisions.json"
        runs = json.loads(record.read_text())["runs"] if record.exists() else {}
        for k, name in enumerate(names):
            codes = [("before", before), ("after", REPO)][:: 1 if k % 2 == 0 else -1]
            for code, tree in codes:
                run(name, tree, COMPARED / code)
            shutil.copy(COMPARED / "after" / f"{name}.jsonl", RESULTS / f"{name}.jsonl")
            runs[name] = {"before": sha[args.rev], "after": sha["HEAD"], "first": codes[0][0]}
            record.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    from render import render

    render(RESULTS, HERE / "RESULTS.md", HERE / "results.png")


if __name__ == "__main__":
    main()
