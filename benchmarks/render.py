"""Turn benchmarks/results/*.jsonl into RESULTS.md and results.png."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def load(results: Path) -> dict[str, tuple[dict, list[dict]]]:
    out = {}
    for f in sorted(results.glob("*.jsonl")):
        lines = [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
        out[f.stem] = (lines[0], lines[1:])
    return out


def find(records: list[dict], **match) -> list[dict]:
    return [r for r in records if all(r.get(k) == v for k, v in match.items())]


def one(records: list[dict], key: str) -> dict:
    return next(r for r in records if key in r)


def fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def headline(data: dict) -> tuple[list[tuple], dict[str, tuple[float, float | None]]]:
    """Rows (issue, measure, ours, baseline, ratio, target, met) and the plot's bars (first, second)."""
    rows, bars = [], {}
    if "core" in data:
        rec = data["core"][1]
        ref, pool = find(rec, system="databricks-sdk-air")[0], find(rec, system="threadpool")[0]
        ours, plan = find(rec, system="air_core.FileStream")[0], find(rec, system="air_core.plan")[0]
        c, w = ours["files_per_s_cold"], ours["files_per_s_warm"]
        rows += [
            ("#2 core", "first epoch, files/s (FileStream)", c, f"reference {fmt(ref['files_per_s_cold'])}",
             c / ref["files_per_s_cold"], "≥ 2,400 and ≥ 5×", c >= 2400 and c / ref["files_per_s_cold"] >= 5),
            ("#2 core", "second epoch, files/s", w, "", None, "≥ 10,000", w >= 10000),
            ("#2 core", "list + plan 2,000 files, s", ours["list_plan_s"], "", None, "≤ 1 s", ours["list_plan_s"] <= 1),
            ("#2 core", "plan 1,000,000 items, s", plan["plan_s"], "", None, "≤ 10 s", plan["plan_s"] <= 10),
        ]
        bars["databricks-sdk-air\n(6 workers)"] = (ref["files_per_s_cold"], ref["files_per_s_warm"])
        bars["bare pool, 64 threads\n(ceiling, no cache)"] = (pool["files_per_s"], None)
        bars["air_core.FileStream"] = (c, w)
    if "torch" in data:
        rec = data["torch"][1]
        s = one(rec, "cold_default_workers")
        nd = s["workers_default"]
        ours = find(rec, system="air_core.torch", workers=nd)
        c = statistics.median(r["files_per_s_cold"] for r in ours)
        w = statistics.median(r["files_per_s_warm"] for r in ours)
        rows += [
            ("#6 torch", f"first epoch, files/s (DataLoader, {nd} workers)", c,
             f"reference {fmt(s['reference_files_per_s_cold'])}", s["cold_default_workers"], "≥ 5×",
             s["cold_default_workers"] >= 5),
            ("#6 torch", "same, 6 workers (the reference's count)", None, "", s["cold_6_workers"], "≥ 5×",
             s["cold_6_workers"] >= 5),
            ("#6 torch", f"warm epochs, files/s ({nd} workers; ratio: median over runs of each run's "
             f"{s['warm_epochs']} epochs in turns with the reference's)", w,
             f"reference {fmt(s['reference_files_per_s_warm'])}", s["warm_default_workers"], "≥ 1×",
             s["warm_default_workers"] >= 1),
            ("#22 torch", "warm epochs, 6 workers (the reference's count), with every hit's length checked; "
             "ratio as above",
             statistics.median(r["files_per_s_warm"] for r in find(rec, system="air_core.torch", workers=6)),
             f"reference {fmt(s['reference_files_per_s_warm'])}", s["warm_6_workers"], "≥ 1×",
             s["warm_6_workers"] >= 1),
        ]
        bars[f"air_core.torch\nDataLoader ({nd} workers)"] = (c, w)
    if "hf" in data:
        rec = data["hf"][1]
        s = one(rec, "summary")
        native = find(rec, system="hf-imagefolder-streaming")[0]
        rows += [
            ("#3 hf", "setup, 2,000 files, s", s["setup_s"], f"imagefolder {fmt(s['imagefolder_setup_s'])}",
             s["imagefolder_setup_s"] / s["setup_s"], "≤ 1 s", s["setup_s"] <= 1),
            ("#3 hf", "first epoch, files/s (DataLoader, 2 workers)", s["cold_files_s"],
             f"imagefolder {fmt(s['imagefolder_cold_files_s'])}", s["cold_vs_imagefolder"], "≥ 2,400",
             s["cold_files_s"] >= 2400),
            ("#3 hf", "second epoch, files/s", s["warm_files_s"], f"imagefolder {fmt(native['warm_files_s'])}",
             s["warm_files_s"] / native["warm_files_s"], "≥ 10,000", s["warm_files_s"] >= 10000),
            ("#3 hf", "Parquet, Arrow batches, rows/s", s["parquet_arrow_rows_s"],
             f"HF parquet {fmt(s['hf_parquet_arrow_rows_s'])}", s["parquet_arrow_vs_hf"], "≥ 1×",
             s["parquet_arrow_vs_hf"] >= 1),
            ("#3 hf", "Parquet, Python rows, rows/s", s["parquet_python_rows_s"],
             f"HF parquet {fmt(s['hf_parquet_python_rows_s'])}", s["parquet_python_vs_hf"], "≥ 1×",
             s["parquet_python_vs_hf"] >= 1),
            ("#3 hf", "3 ranks over 4 Parquet files: volume bytes ÷ data", s["ranks_volume_bytes_ratio"],
             f"HF {fmt(s['hf_ranks_volume_bytes_ratio'])}", None, "≤ 1.1", s["ranks_volume_bytes_ratio"] <= 1.1),
        ]
        bars["HF imagefolder\nstreaming"] = (s["imagefolder_cold_files_s"], native["warm_files_s"])
        bars["air_hf uc-volume\nDataLoader (2 workers)"] = (s["cold_files_s"], s["warm_files_s"])
    if "ray" in data:
        rec = data["ray"][1]

        def rate(system: str, execution: int, key: str = "files_per_s") -> float:
            return next(r for r in find(rec, system=system, execution=execution) if "median_of" in r)[key]

        nat = [rate("ray.read_binary_files", e) for e in (1, 2)]
        in_memory = [rate("in-memory bytes through Ray (nothing read)", e) for e in (1, 2)]
        ours = [rate("air_ray.read_uc_volume files", e) for e in (1, 2)]
        paths = [rate("air_ray.read_uc_volume files, local_path rows", e) for e in (1, 2)]
        pq_n = [rate("ray.read_parquet", e, "rows_per_s") for e in (1, 2)]
        pq_o = [rate("air_ray.read_uc_volume parquet", e, "rows_per_s") for e in (1, 2)]
        rows += [
            ("#4 ray", "first execution, files/s (default rows: local_path; medians from here on)", paths[0],
             f"read_binary_files {fmt(nat[0])}", paths[0] / nat[0], "≥ 1,500", paths[0] >= 1500),
            ("#4 ray", "second execution, files/s (default rows)", paths[1], f"read_binary_files {fmt(nat[1])}",
             paths[1] / nat[1], "≥ 5,000", paths[1] >= 5000),
            ("#4 ray", "first execution, files/s (include_bytes: bytes through the object store)", ours[0],
             f"read_binary_files {fmt(nat[0])}", ours[0] / nat[0], "≥ 1,500", ours[0] >= 1500),
            ("#4 ray", "second execution, files/s (include_bytes)", ours[1], f"read_binary_files {fmt(nat[1])}",
             ours[1] / nat[1], "≥ 5,000", ours[1] >= 5000),
            ("#4 ray", "second execution, include_bytes beside rows made from bytes already in memory", ours[1],
             f"in-memory source {fmt(in_memory[1])}", ours[1] / in_memory[1], "", None),
            ("#4 ray", "Parquet first execution, rows/s", pq_o[0], f"read_parquet {fmt(pq_n[0])}", pq_o[0] / pq_n[0],
             "≥ 1×", pq_o[0] >= pq_n[0]),
            ("#4 ray", "Parquet second execution, rows/s", pq_o[1], f"read_parquet {fmt(pq_n[1])}", pq_o[1] / pq_n[1],
             "≥ 1×", pq_o[1] >= pq_n[1]),
        ]
        bars["Ray read_binary_files"] = tuple(nat)
        bars["air_ray read_uc_volume\n(local_path rows)"] = tuple(paths)
        bars["air_ray read_uc_volume\n(include_bytes)"] = tuple(ours)
    if "delta" in data:
        s = one(data["delta"][1], "ratio_ours_over_deltalake_fs")
        r = s["rows_per_s_median"]
        rows.append(("#5 delta", "export, rows/s (median)", r["ours"],
                     f"deltalake + write_dataset {fmt(r['own'])}", s["ratio_ours_over_deltalake_fs"], "≥ 0.9×",
                     s["ratio_ours_over_deltalake_fs"] >= 0.9))
        back = one(data["delta"][1], "hf_ours_over_native")["rows_per_s_median"]
        for door, native in (("hf", "HF parquet"), ("ray", "Ray read_parquet")):
            ratio = back[f"{door}-ours"] / back[f"{door}-native"]
            rows.append(("#5 delta", f"the export streamed through {door}, rows/s (median)", back[f"{door}-ours"],
                         f"{native} {fmt(back[f'{door}-native'])}", ratio, "≥ 1×", ratio >= 1))
    if "pack" in data:
        rows += pack_targets(data["pack"][1])
    if "lines" in data:
        rows += lines_targets(data["lines"][1])
    if "webdataset" in data:
        rows += webdataset_targets(data["webdataset"][1])
    if "media" in data:
        rows += media_targets(data["media"][1])
    if "files_api" in data:
        rows += files_api_targets(one(data["files_api"][1], "summary"))
    if "mixture" in data:
        rows += mixture_targets(one(data["mixture"][1], "summary"))
    if "resume" in data:
        rows += resume_targets(one(data["resume"][1], "summary"))
    if "columns" in data:
        rows += columns_targets(data["columns"][1])
    if "stalls" in data:
        s = one(data["stalls"][1], "summary")
        ratio = s["stalls_over_no_stalls_worst"]
        rows += [
            ("#7 stalls", f"first epoch with 0.05% of reads stuck 20 s ÷ without (worst of {s['rounds']} rounds)",
             None, "", ratio, "≤ 2×", ratio <= 2),
            ("#7 stalls", "extra reads without stalls, % of files (most of any round)",
             s["extra_reads_pct_no_stalls_max"], "", None, "≤ 1 %", s["extra_reads_pct_no_stalls_max"] <= 1),
        ]
    if "scale" in data:
        rec = [r for r in data["scale"][1] if "plan_s" in r]  # not the listing's record
        new, old = find(rec, code="new", files=10**7), find(rec, code="old", files=10**6)
        if new:
            n = new[0]
            rows += [
                ("#11 scale", "plan of one stream of 8x6, one epoch, 10^7 files, s", n["plan_s"], "", None, "≤ 2 s",
                 n["plan_s"] <= 2),
                ("#11 scale", "resume after a 3-level chain, 10^7 files, s", n["resume_s"], "", None, "≤ 5 s",
                 n["resume_s"] <= 5),
                ("#11 scale", "first item after the DataLoader starts (6 workers), 10^7 files, s", n["first_item_s"],
                 "", None, "≤ 5 s", n["first_item_s"] <= 5),
                ("#11 scale", "PSS per worker above an idle worker, 10^7 files, MB", n["worker_over_idle_mb"], "",
                 None, "≤ 100 MB", n["worker_over_idle_mb"] <= 100),
            ]
        doors = find(data["scale"][1], what="doors", code="new")
        if doors and "hf_setup_s" in doors[0] and "ray_setup_s" in doors[0]:
            d = doors[0]
            rows += [
                ("#11 scale", f"HF streaming setup, {d['files']:,} files, s", d["hf_setup_s"], "", None, "≤ 5 s",
                 d["hf_setup_s"] <= 5),
                ("#11 scale", f"Ray datasource + read tasks, {d['files']:,} files, s", d["ray_setup_s"], "", None,
                 "≤ 5 s", d["ray_setup_s"] <= 5),
            ]
        if old and find(rec, code="new", files=10**6):
            n6, o6 = find(rec, code="new", files=10**6)[0], old[0]
            rows.append(("#11 scale", "plan of one stream, 10^6 files, s", n6["plan_s"], f"before {fmt(o6['plan_s'])}",
                         o6["plan_s"] / n6["plan_s"], "", None))
    return rows, bars


def pack_targets(rec: list[dict]) -> list[tuple]:
    """The pack issue's target rows: packed first epochs, second epochs against loose, pack speed."""
    def rate(system: str, layout: str, epoch: str) -> float:
        return find(rec, system=system, layout=layout)[0][f"{epoch}_files_per_s"]

    fs_loose, fs_packed = rate("FileStream", "loose", "cold"), rate("FileStream", "packed", "cold")
    hf_packed, native = rate("HF uc-volume", "packed", "cold"), rate("HF parquet (native)", "packed", "cold")
    speed = find(rec, system="pack")[0]["files_per_s"]
    rows = [
        ("pack", "first epoch, files/s (FileStream, packed)", fs_packed, f"loose {fmt(fs_loose)}",
         fs_packed / fs_loose, "≥ 8,000", fs_packed >= 8000),
        ("pack", "first epoch, files/s (HF, DataLoader 2 workers, packed)", hf_packed, f"HF parquet {fmt(native)}",
         hf_packed / native, "≥ 8,000 and ≥ 1×", hf_packed >= 8000 and hf_packed >= native),
        ("pack", "pack, files/s", speed, f"loose first epoch {fmt(fs_loose)}", speed / fs_loose, "≥ 0.8×",
         speed >= 0.8 * fs_loose),
    ]
    for system in ("FileStream", "HF uc-volume", "Ray", "torch UCVolumeDataset"):
        w_loose, w_packed = rate(system, "loose", "warm"), rate(system, "packed", "warm")
        rows.append(("pack", f"second epoch, files/s ({system}, packed)", w_packed, f"loose {fmt(w_loose)}",
                     w_packed / w_loose, "≥ 1×", w_packed >= w_loose))
    return rows


LINES_CASES = {"big": "1 file", "many": "64 files"}


def lines_targets(rec: list[dict]) -> list[tuple]:
    """The JSON Lines issue's target rows, per case: volume bytes across ranks, rows/s against HF's json builder
    and against pyarrow's parse, a second epoch's volume bytes."""
    rows = []
    for s in (r for r in rec if "summary" in r):
        case = f"JSON Lines, {LINES_CASES.get(s['case'], s['case'])}"
        for prefix, door in (("", "uc-volume"), ("core_", "UCVolumeDataset rows")):
            if f"{prefix}volume_bytes_ratio" in s:
                rows.append(("lines", f"{case}: volume bytes, {door}, 2 ranks, setup + first epoch ÷ data",
                             s[f"{prefix}volume_bytes_ratio"],
                             f"HF json {fmt(s['hf_volume_bytes_ratio'])}" if "hf_volume_bytes_ratio" in s else "",
                             None, "≤ 1.05", s[f"{prefix}bytes_ok"]))
            if f"{prefix}vs_hf_json" in s:
                rows.append(("lines", f"{case}: first epoch rows/s, {door}, 2 ranks x 2 DataLoader workers",
                             s[f"{prefix}rows_s"], f"HF json {fmt(s['hf_rows_s'])}", s[f"{prefix}vs_hf_json"], "≥ 2×",
                             s[f"{prefix}vs_hf_ok"]))
            if f"{prefix}vs_parse" in s:
                rounds = f"median of {len(s['rounds']['pyarrow-parse'])} rounds" if "rounds" in s else "one run"
                rows.append(("lines", f"{case}: the same rows/s beside the parse ceiling ({rounds})",
                             s[f"{prefix}rows_s"], f"pyarrow.json {fmt(s['parse_rows_s'])}", s[f"{prefix}vs_parse"],
                             "≥ 0.7×", s[f"{prefix}vs_parse_ok"]))
            if f"{prefix}second_bytes_ratio" in s:
                rows.append(("lines", f"{case}: second epoch, {door}, volume bytes ÷ data",
                             s[f"{prefix}second_bytes_ratio"], "", None, "0", s[f"{prefix}second_ok"]))
        if "rowstream_vs_hf_json" in s:
            rows.append(("lines", f"{case}: first epoch rows/s, RowStream in Arrow tables, 2 ranks x 2 workers",
                         s["rowstream_rows_s"], f"HF json {fmt(s['hf_rows_s'])}", s["rowstream_vs_hf_json"], "≥ 2×",
                         s["rowstream_vs_hf_json"] >= 2))
        if "rowstream_vs_parse" in s:  # tables, not rows: the targets are for rows (see the section's notes)
            rows.append(("lines", f"{case}: the same Arrow tables' rows/s beside the parse ceiling",
                         s["rowstream_rows_s"], f"pyarrow.json {fmt(s['parse_rows_s'])}", s["rowstream_vs_parse"],
                         "", None))
    return rows


LINES_SYSTEMS = [
    ("uc-volume", "uc-volume, DataLoader (2 workers a rank)"),
    ("air_core-rows", "air_core `UCVolumeDataset(mode=\"rows\")`, its DataLoader (2 workers a rank)"),
    ("hf-json", "HF `json`, DataLoader (2 workers a rank)"),
    ("air_core-rowstream", "air_core `RowStream`, DataLoader of Arrow tables (2 workers a rank)"),
    ("uc-volume-arrow", "uc-volume, Arrow batches (no DataLoader)"),
    ("hf-json-arrow", "HF `json`, Arrow batches (no DataLoader)"),
    ("air_ray-read_uc_volume", "air_ray `read_uc_volume` (one process)"),
    ("ray-read_json", "Ray `read_json` (one process)"),
    ("pyarrow-parse", "`pyarrow.json.read_json`, local, no netvol"),
]


def lines_section(rec: list[dict]) -> list[str]:
    """RESULTS.md's JSON Lines section: every system's rows/s and volume bytes, per case."""
    lines = ["## JSON Lines: one large file, and many files, over 2 ranks", "", *LINES_NOTES]
    for s in (r for r in rec if "summary" in r):
        lines += ["", f"**{s['summary']}**", "", *systems_table(rec, LINES_SYSTEMS, "rows", case=s["case"])]
    return lines


def systems_table(rec: list[dict], systems: list[tuple[str, str]], unit: str, **match) -> list[str]:
    """A table of each system's aggregate record (not its ranks'): `unit`/s, CPU a `unit`, volume bytes, whether
    complete."""
    one_unit = unit[:-1] if unit.endswith("s") else unit
    lines = [(f"| system | first epoch, {unit}/s | per rank | second epoch, {unit}/s | CPU µs a {one_unit}: first, "
              "second | volume bytes ÷ data: setup, first epoch (per rank), second | "
              f"{unit} complete |"),
             "| --- | ---: | --- | ---: | --- | --- | --- |"]
    for system, label in systems:
        runs = sorted((x for x in find(rec, system=system, **match) if "rank" not in x),
                      key=lambda x: x["first_rows_s"])
        if not runs:
            continue
        r = runs[(len(runs) - 1) // 2]  # run in rounds: the median round, as the summary takes it
        if len(runs) > 1:
            label += f", median of {len(runs)} rounds"
        per_rank = ", ".join(fmt(x) for x in r.get("first_rows_s_per_rank", []))
        second = fmt(r["second_rows_s"]) if "second_rows_s" in r else ""
        if "setup_bytes_ratio" in r:
            ranks = ", ".join(f"{x:.3f}" for x in r["first_bytes_ratio_per_rank"])
            volume = (f"{r['setup_bytes_ratio']:.3f}, {r['first_bytes_ratio']:.3f} ({ranks}), "
                      f"{r['second_bytes_ratio']:.3f}")
        elif "first_bytes_ratio" in r:
            volume = f"-, {r['first_bytes_ratio']:.3f}, {r['second_bytes_ratio']:.3f}"
        else:
            volume = "not from the volume"
        complete = "yes" if all(r.get(k, True) for k in ("first_complete", "second_complete")) else "**no**"
        cpu = ", ".join(f"{r[k]:.1f}" for k in ("first_cpu_us_per_row", "second_cpu_us_per_row")
                        if r.get(k) is not None)
        lines.append(f"| {label} | {fmt(r['first_rows_s'])} | {per_rank} | {second} | {cpu} | {volume} | "
                     f"{complete} |")
    return lines


def webdataset_targets(rec: list[dict]) -> list[tuple]:
    """The WebDataset issue's target rows: volume bytes across ranks, samples/s against HF's webdataset builder, a
    second epoch's volume bytes; Ray's readers beside each other, with no target."""
    rows = []
    for s in (r for r in rec if "summary" in r):
        if "volume_bytes_ratio" in s:
            rows.append(("webdataset", "tars: volume bytes, 2 ranks, setup + first epoch ÷ data",
                         s["volume_bytes_ratio"],
                         f"HF webdataset {fmt(s['hf_volume_bytes_ratio'])}" if "hf_volume_bytes_ratio" in s else "",
                         None, "≤ 1.05", s["bytes_ok"]))
        if "vs_hf_webdataset" in s:
            rows.append(("webdataset", "tars: first epoch samples/s, 2 ranks x 2 DataLoader workers", s["rows_s"],
                         f"HF webdataset {fmt(s['hf_rows_s'])}", s["vs_hf_webdataset"], "≥ 2×", s["vs_hf_ok"]))
        if "rowstream_vs_hf_webdataset" in s:
            rows.append(("webdataset", "tars: first epoch samples/s, RowStream in Arrow tables, 2 ranks x 2 workers",
                         s["rowstream_rows_s"], f"HF webdataset {fmt(s['hf_rows_s'])}",
                         s["rowstream_vs_hf_webdataset"], "≥ 2×", s["rowstream_vs_hf_webdataset"] >= 2))
        if "second_bytes_ratio" in s:
            rows.append(("webdataset", "tars: second epoch, volume bytes ÷ data", s["second_bytes_ratio"], "", None,
                         "0", s["second_ok"]))
        if "air_ray_vs_ray" in s:
            rows.append(("webdataset", "tars: Ray, first execution, samples/s (read_uc_volume)", s["air_ray_rows_s"],
                         f"read_webdataset {fmt(s['ray_rows_s'])}", s["air_ray_vs_ray"], "", None))
            rows.append(("webdataset", "tars: Ray, second execution, samples/s (read_uc_volume)",
                         s["air_ray_second_rows_s"], f"read_webdataset {fmt(s['ray_second_rows_s'])}",
                         s["air_ray_second_vs_ray"], "", None))
    return rows


def files_api_targets(s: dict) -> list[tuple]:
    """The Files API issues' target rows: files/s beside the SDK's download patterns (one at a time: no target; a
    pool of 64 threads: at least its rate), bytes requested across 2 ranks, a second epoch's requests."""
    f = s["files_s"]
    return [
        ("#24 files-api", "files mode, first epoch, files/s (listing included)", f["ours"],
         f"one files.download a file {fmt(f['mosaic'])}", s["ours_vs_mosaic"], "", None),
        ("#42 files-api", "files mode, first epoch, files/s (listing included)", f["ours"],
         f"64 threads of files.download {fmt(f['pool'])}", s["ours_vs_pool"], "≥ 1.0", s["ours_vs_pool"] >= 1.0),
        ("#24 files-api", "Parquet, 2 ranks, bytes requested ÷ needed", s["parquet_bytes_ratio"], "", None, "≤ 1.05",
         s["parquet_bytes_ratio"] <= 1.05),
        ("#24 files-api", "pack, 2 ranks, bytes requested ÷ needed", s["pack_bytes_ratio"], "", None, "≤ 1.05",
         s["pack_bytes_ratio"] <= 1.05),
        ("#24 files-api", "second epoch, requests (files, Parquet, pack)", sum(s["second_epoch_requests"]), "", None,
         "0", s["second_ok"]),
    ]


def mixture_targets(s: dict) -> list[tuple]:
    """The mixtures issue's target rows: planning a 3-source epoch for one stream, and a mixed epoch's speed beside
    the same files read as one folder."""
    target = s["speed_target_ratio"]
    return [
        ("#23 mixture", f"planning a 3-source epoch of {s['plan_items']:,} items for one stream, s", s["plan_s"], "",
         None, f"≤ {s['plan_target_s']:g} s", s["plan_ok"]),
        ("#23 mixture", f"first epoch of {s['files']:,} files, mixed ÷ one folder of them", s["mixed_over_folder_cold"],
         "", None, f"≥ {target:g}", s["mixed_over_folder_cold"] >= target),
        ("#23 mixture", "warm epochs, mixed ÷ one folder", s["mixed_over_folder_warm"], "", None, f"≥ {target:g}",
         s["mixed_over_folder_warm"] >= target),
    ]


def resume_targets(s: dict) -> list[tuple]:
    """The issue of resuming a Trainer: rows of the finished steps read again on a resume with the callback, and its
    time to the first step beside a fresh start's and the Trainer's own skipping."""
    at = f"resumed at step {s['steps']:,} of batch {s['batch']}"
    target = s["time_target_ratio"]
    return [
        ("#41 resume", f"{at}: rows of the finished steps reaching the map or collator, StreamResumeCallback",
         f"{s['callback_finished_rows_read']:,}", f"Trainer's skipping {s['default_mapped_finished_rows']:,.0f}",
         None, "0", s["finished_rows_ok"]),
        ("#41 resume", f"{at}: time to the first step ÷ a fresh start's, StreamResumeCallback",
         s["callback_first_step_s"], f"fresh start {fmt(s['fresh_first_step_s'])} s", s["callback_over_fresh"],
         f"≤ {target:g}×", s["time_ok"]),
        ("#41 resume", f"{at}: time to the first step ÷ a fresh start's, the Trainer's own skipping",
         s["default_first_step_s"], f"fresh start {fmt(s['fresh_first_step_s'])} s", s["default_over_fresh"], "",
         None),
    ]


def columns_targets(rec: list[dict]) -> list[tuple]:
    """The projections issue's target rows, per case: bytes from the volume and rows/s of `columns=["text"]`
    beside HF's `parquet` builder and Ray's `read_parquet`, and every column beside the code before projections."""
    rows = []
    for s in (r for r in rec if "summary" in r):
        case = f"{s['rows']:,} rows, {s['bytes'] / 1e6:,.0f} MB"
        rows += [
            ("#42 columns", f"{case}: columns=['text'], bytes from the volume (HF door)", s["volume_bytes"],
             f"HF parquet {fmt(s['hf_volume_bytes'])}", s["bytes_vs_hf"], "≤ 1.5×", s["bytes_ok"]),
            ("#42 columns", f"{case}: columns=['text'], rows/s (HF door; ratio: median of the rounds')",
             s["rows_s"], f"HF parquet {fmt(s['hf_rows_s'])}", s["vs_hf"], "≥ 1×", s["vs_hf_ok"]),
            ("#42 columns", f"{case}: columns=['text'], rows/s (read_uc_volume)", s["ray_ours_rows_s"],
             f"Ray read_parquet {fmt(s['ray_rows_s'])}", s["vs_ray"], "≥ 1×", s["vs_ray_ok"]),
        ]
        if "all_vs_before" in s:
            low, high = s["all_vs_before_spread"]
            rows.append(("#42 columns", f"{case}: every column, rows/s (HF door) ÷ before projections "
                         f"({s['before']}; rounds {low:.2f}-{high:.2f})", s["all_rows_s"],
                         f"before {fmt(s['all_before_rows_s'])}", s["all_vs_before"], "≥ 1× (spread)", s["all_ok"]))
    return rows


RESUME_SYSTEMS = [
    ("fresh", "a fresh start (`train()`), with the callback"),
    ("callback", "resumed with `StreamResumeCallback`"),
    ("default", "resumed by the Trainer's own skipping"),
]

RESUME_NOTES = [
    "## Resuming a Trainer mid-epoch",
    "",
    "`bench_resume.py`: chat JSON Lines records in 16 files under netvol, tokenized by a `.map` over",
    "`load_dataset(\"uc-volume\", ..., streaming=True)`, a tiny GPT-2 built from a config and `transformers.Trainer`",
    "with batch 8, one process. One run trains to step N with `StreamResumeCallback` (a checkpoint there), then",
    "each measurement starts a process with an empty node cache (a restart on another machine) and times",
    "`train()` to the end of its first step: a fresh start, the resume from step N with the callback, and the",
    "same resume without it (accelerate's `skip_first_batches` reads and drops the finished steps' batches).",
    "Rows are counted as they reach the map and the collator; volume bytes come from netvol's trace, from",
    "`train()` to the end of the first step (`load_dataset`'s sample of records for the features apart).",
]


def resume_section(rec: list[dict]) -> list[str]:
    """RESULTS.md's section of resuming a Trainer: each measurement's medians over the rounds."""
    s = one(rec, "summary")
    lines = [*RESUME_NOTES, "", f"**{s['records']:,} records ({s['data_bytes'] / 1e6:,.0f} MB), resumed at step "
             f"{s['steps']:,}; medians of {s['rounds']} rounds**", "",
             "| system | s to the first step | rows mapped by then | of the finished steps | volume bytes by then |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for system, label in RESUME_SYSTEMS:
        finished = s.get(f"{system}_mapped_finished_rows")
        lines.append(f"| {label} | {s[f'{system}_first_step_s']:.3f} | {s[f'{system}_mapped_rows']:,.0f} | "
                     f"{'' if finished is None else f'{finished:,.0f}'} | {s[f'{system}_first_step_bytes']:,.0f} |")
    return lines


WEBDATASET_SYSTEMS = [
    ("uc-volume", "uc-volume, DataLoader (2 workers a rank)"),
    ("hf-webdataset", "HF `webdataset`, DataLoader (2 workers a rank)"),
    ("air_core-rowstream", "air_core `RowStream`, DataLoader of Arrow tables (2 workers a rank)"),
    ("air_ray-read_uc_volume", "air_ray `read_uc_volume` (one process)"),
    ("ray-read_webdataset", "Ray `read_webdataset` (one process)"),
]

WEBDATASET_NOTES = [
    "`bench_webdataset.py`: 32 WebDataset tars of about 16 MB, each sample a ~100 KiB JPEG of noise, a `.json`",
    "(`id`, `label`, `caption_words`), a `.txt` caption and a `.cls` class, under netvol. Ranks are processes",
    "started together, sharing one node cache (empty at the start of each system's run); each counts its samples,",
    "sums their JSON ids and their image bytes, so \"samples complete\" means every sample exactly once, its image",
    "whole. No reader decodes an image: both HF builders' `jpg` is cast to `Image(decode=False)`, Ray's",
    "`read_webdataset` gets a decoder that parses the JSON, text and class members and leaves the image's bytes.",
    "Volume bytes come from netvol's trace (`read PATH BYTES` per closed file, one trace file per rank, its",
    "DataLoader workers included), as a multiple of the tars' bytes; setup is `load_dataset` (uc-volume reads the",
    "first tars of the listing through the node cache to find the columns, and the epochs then read those from",
    "the cache; HF's builder reads the first samples of the first tar). Samples/s in all is the samples over the",
    "slowest rank's epoch.",
]


def webdataset_section(rec: list[dict]) -> list[str]:
    """RESULTS.md's WebDataset section: every system's samples/s and volume bytes."""
    lines = ["## WebDataset: a folder of tars over 2 ranks", "", *WEBDATASET_NOTES]
    for s in (r for r in rec if "summary" in r):
        lines += ["", f"**{s['summary']}**", "", *systems_table(rec, WEBDATASET_SYSTEMS, "samples")]
    return lines


MEDIA_LAYOUTS = {"folder": "HF folder", "llava": "LLaVA"}
MEDIA_PEERS = {"folder": ("hf_imagefolder", "HF imagefolder", "≥ 10×"),  # each layout's peer: its key, name, target
               "llava": ("ray_download", "Ray download()", "≥ 2×")}


def media_targets(rec: list[dict]) -> list[tuple]:
    """The issue of records that name media: per layout and door, first-epoch records/s against our files mode over
    the same images and against the layout's peer, volume bytes across ranks, a second epoch's volume bytes."""
    rows = []
    for s in (r for r in rec if "summary" in r):
        layout = f"records naming images, {MEDIA_LAYOUTS.get(s['case'], s['case'])}"
        key, peer, target = MEDIA_PEERS[s["case"]]
        for prefix, door in (("", "uc-volume"), ("core_", "UCVolumeDataset rows")):
            if f"{prefix}vs_files" in s:
                rows.append(("#40 media", f"{layout}: first epoch records/s, {door}, 2 ranks x 2 DataLoader workers",
                             s[f"{prefix}rows_s"], f"files mode {fmt(s[f'{prefix}files_rows_s'])}",
                             s[f"{prefix}vs_files"], "≥ 0.8×", s[f"{prefix}vs_files_ok"]))
            if f"{prefix}vs_{key}" in s:
                rows.append(("#40 media", f"{layout}: the same records/s beside {peer}", s[f"{prefix}rows_s"],
                             f"{peer} {fmt(s[f'{key}_rows_s'])}", s[f"{prefix}vs_{key}"], target,
                             s[f"{prefix}vs_{key}_ok"]))
            if f"{prefix}volume_bytes_ratio" in s:
                rows.append(("#40 media", f"{layout}: volume bytes, {door}, 2 ranks, setup + first epoch ÷ records + "
                             "images", s[f"{prefix}volume_bytes_ratio"],
                             f"{peer} {fmt(s[f'{key}_volume_bytes_ratio'])}" if f"{key}_volume_bytes_ratio" in s
                             else "", None, "≤ 1.05", s[f"{prefix}bytes_ok"]))
                rows.append(("#40 media", f"{layout}: second epoch, {door}, volume bytes ÷ records + images",
                             s[f"{prefix}second_bytes_ratio"], "", None, "0", s[f"{prefix}second_ok"]))
        if "air_ray_vs_ray_download" in s:
            rows.append(("#40 media", f"{layout}: Ray, first execution, records/s (read_uc_volume, include_bytes)",
                         s["air_ray_rows_s"], f"Ray download() {fmt(s['ray_download_rows_s'])}",
                         s["air_ray_vs_ray_download"], "", None))
    return rows


MEDIA_SYSTEMS = [
    ("uc-volume", "uc-volume, DataLoader (2 workers a rank)"),
    ("air_core-rows", "air_core `UCVolumeDataset(mode=\"rows\")`, its DataLoader (2 workers a rank)"),
    ("hf-imagefolder", "HF `imagefolder`, DataLoader (2 workers a rank)"),
    ("air_ray-read_uc_volume", "air_ray `read_uc_volume`, `include_bytes` (one process)"),
    ("ray-download", "Ray `read_json` + `download()` (one process)"),
]

MEDIA_FILES_SYSTEMS = [
    ("uc-volume-files", "uc-volume files mode, DataLoader (2 workers a rank)"),
    ("air_core-files", "air_core `UCVolumeDataset` files mode, its DataLoader (2 workers a rank)"),
]

MEDIA_NOTES = [
    "`bench_media.py`: N JPEGs of ~147 KiB of noise in folders of 1,000, each with a comment segment naming its",
    "id, named by records in two layouts: HF's (`metadata.jsonl` beside the images: `file_name`, `id`, `caption`)",
    "and LLaVA's (a JSON Lines file of `conversations` naming them under a sibling `images/` folder, read with",
    "`media={\"image\": \"image\"}, media_dir=\"images\"`), under netvol. Ranks are 2 processes started together,",
    "each with a node cache of its own (empty at the start of each system's run), as two nodes. No reader decodes",
    "an image: HF's datasets are cast to `Image(decode=False)`, and every consumer reads each image's bytes (from",
    "the path it is given: our cached copy, or for `imagefolder` the volume's file), counts its records and sums",
    "their ids and image bytes, so \"records complete\" means every record exactly once with its image whole.",
    "Files mode reads the same images loose (`include=\"*.jpg\"`), each id read from the image's bytes: what the",
    "records should cost little on top of, through the same door. Volume bytes come from netvol's trace, as a",
    "multiple of the records' and images' bytes (the images' alone for files mode). `imagefolder` makes one shard",
    "of one metadata file, so each rank reads every record and keeps every other, and one of its 2 workers idles.",
    "Ray's `download()` runs in one process with every worker set up so that fsspec's HTTP file system, which it",
    "imports for each path on 16 threads, fails to import at once where aiohttp is not installed: otherwise",
    "imports racing one another fail and Ray turns the images they were for into nulls.",
]


def media_section(rec: list[dict]) -> list[str]:
    """RESULTS.md's section of records that name media: every system's records/s and volume bytes, per layout, and
    our files mode over the same images."""
    lines = ["## Records that name images: HF's folder layout and LLaVA's, over 2 ranks", "", *MEDIA_NOTES]
    for s in (r for r in rec if "summary" in r):
        lines += ["", f"**{s['summary']}**", "", *systems_table(rec, MEDIA_SYSTEMS, "records", case=s["case"])]
    lines += ["", "**The same images loose, files mode**", "",
              *systems_table(rec, MEDIA_FILES_SYSTEMS, "files", case=None)]
    return lines


LINES_NOTES = [
    "`bench_lines.py`: chat-like JSON Lines records (`id`, two `messages`, `source`; about 1.6 KB each) as",
    "one file of 1 GB and as 64 files of 16 MB, under netvol. Ranks are processes started together, sharing",
    "one node cache (empty at the start of each system's run); each counts its rows and sums their ids, so",
    "\"rows complete\" means the ranks' rows are every record exactly once. Rows/s in all is the rows over",
    "the slowest rank's epoch. Volume bytes come from netvol's trace (`read PATH BYTES` per closed file, one",
    "trace file per rank, its DataLoader workers included), as a multiple of the case's bytes; setup is",
    "`load_dataset` (uc-volume reads a sample of records at the start of the listing through the node cache",
    "to infer the features, and the epochs then read those spans from the cache; HF's json builder reads",
    "the first 10 MB of the first file). CPU µs a row is the rank's and its DataLoader workers' CPU time",
    "(`getrusage`, and /proc for workers that persist across epochs) over its rows, a figure other work on",
    "the machine moves less than rows/s. The machine is otherwise idle (its 1-minute load rose to 2-4 with",
    "the benchmark's own processes). A run's figures move 10-20% from one run to the next (the parse ceiling",
    "read 571k-824k rows/s over a dozen runs here, 432k-716k over this session's), and from one machine to",
    "another more, so the two sides of the ratio to the ceiling take turns: uc-volume, `UCVolumeDataset` rows",
    "and the parse run 3 rounds, each counts by its median round (the tables below show that round), and",
    "the ratio is the median of the rounds' ratios, each against its own round's parse.",
    "",
    "What bounds each figure:",
    "",
    "- Through a DataLoader, rows come one at a time out of `datasets`' `IterableDataset`. For HF's json",
    "  builder it cuts each table into one-row tables and converts each to a Python dict (~30 µs a row,",
    "  more than reading and parsing it). The uc-volume builder's examples iterable reports its features",
    "  (`air_hf/examples.py`), so `datasets` skips that step, and its JSON Lines rows skip Arrow: msgspec",
    "  decodes about 256 KiB of records at a time straight into dicts of the schema's types, as the",
    "  consumer reaches them (`Format.row_run_bytes`). A span's 16 MiB of rows made at once cost twice as",
    "  much: they left the CPU's cache before they were used, and their memory went back to the system",
    "  and was faulted in again for the next span (in one process, warm, 1.4-2.5 against 2.9-4.0 µs a chat",
    "  row through the HF door; a shuffled read still decodes a span's records at once, its draw being",
    "  over them all). The first epoch also copies every span into the node cache, about 1 µs of system",
    "  time a row more than the second (sendfile into tmpfs and the pages it takes; user time is the same).",
    "- With one file and 2 ranks HF's json builder has one shard: `split_dataset_by_node` makes every rank",
    "  read and parse the whole file and keep every other row, and one of each rank's 2 DataLoader workers",
    "  idles: 2.0x the bytes.",
    "- The core's own door for PyTorch, `UCVolumeDataset(mode=\"rows\")` in `air_core.torch.DataLoader`, reads",
    "  the same Python rows (`RowStream`'s iteration, msgspec as above) in one Python loop a row, where",
    "  `datasets` runs two (its examples iterable's and its dataset's); its workers persist across epochs",
    "  (the loader's default).",
    "- `RowStream`'s Arrow tables through the same DataLoader (`tables(batch_size=256)`, each a copy of its",
    "  rows, with `batch_size=None`) are the door for consumers of Arrow, measured beside the targets, which",
    "  are for rows. Each span is parsed whole by pyarrow, on one thread per worker, and handed out in copies",
    "  of 256 rows: for these records that costs more a row than msgspec's rows. Parsing spans in",
    "  256 KiB runs instead cost it 1.5-2.2 µs a row more, in 1 MiB runs up to 1 more; parsing on one",
    "  thread per worker changed nothing. A slice of a span would carry the span's buffers when pickled",
    "  (~16x its rows' bytes): in one process, a DataLoader with 2 workers over 60,000 chat records took",
    "  27-31k rows/s in slices, 98-106k in copies.",
    "- One large file costs our reader a little more CPU than many small ones: each span's last record is",
    "  joined to its run-on, read from the next span's start as a cache entry of its own.",
    "- The parse ceiling runs `pyarrow.json.read_json` on each file (default options, its own threads on",
    "  both cores), the best of 2 passes, with no netvol and nothing else of the benchmark running.",
    "  `JsonFormat.parse` (an explicit schema, 4 MiB blocks) took 10-30% more CPU a row than that default",
    "  over the same runs, and a 4 MB run is one block, parsed on one thread.",
    "- Ray, one process: `read_uc_volume` makes one read task per CPU over byte-balanced spans, its second",
    "  execution from the node cache; `read_json` reads each file in one task (the 1 GB file in one) and",
    "  reads the volume again every execution.",
]


def pack_section(rec: list[dict], png: Path) -> list[str]:
    """RESULTS.md's pack section: every front door over loose files and over a pack of them, and its plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = find(rec, system="pack")[0]
    readers = [r for r in rec if "layout" in r]
    lines = [
        "## Pack: loose files vs a pack of them",
        "",
        f"`bench_pack.py`: {p['files']:,} JPEGs of ~147 KiB ({p['GB']} GB) packed into {p['shards']} shards of",
        f"about 1 GiB in {p['pack_s']} s ({fmt(p['files_per_s'])} files/s; copying a shard onto this volume,",
        f"a disk here, runs at {fmt(p['volume_write_MBps'])} MB/s, and a pack writes every byte onto it), then",
        "read loose and packed by",
        "each front door, each in a fresh process with an empty node cache; every reader gets each file's",
        "bytes into the consumer (HF and torch through a DataLoader with 2 workers, whose rows cross",
        "process boundaries). `HF parquet (native)` is `load_dataset(\"parquet\", streaming=True)` over the",
        "same shards.",
        "",
        "| reader | layout | first epoch, files/s | second epoch, files/s |",
        "| --- | --- | ---: | ---: |",
    ]
    lines += [f"| {r['system']} | {r['layout']} | {fmt(r['cold_files_per_s'])} | {fmt(r['warm_files_per_s'])} |"
              for r in readers]
    names = [f"{r['system']}\n{r['layout']}" for r in readers]
    fig, ax = plt.subplots(figsize=(12, 5))
    xs = range(len(names))
    for shift, key, label, color in ((-0.2, "cold", "first epoch", "#4c72b0"), (0.2, "warm", "second epoch",
                                                                                   "#dd8452")):
        values = [r[f"{key}_files_per_s"] for r in readers]
        ax.bar([x + shift for x in xs], values, 0.4, label=label, color=color)
        for x, v in zip(xs, values):
            ax.text(x + shift, v * 1.05, fmt(v), ha="center", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("files/s (log scale)")
    ax.set_xticks(list(xs), names, fontsize=7)
    ax.set_title(f"{p['files']:,} JPEGs of ~147 KiB, loose vs packed (1 GiB shards), emulated volume, 2 cores")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    return lines + ["", f"![loose vs packed]({png.name})", "", *PACK_NOTES]


PACK_NOTES = [
    "What bounds each figure here:",
    "",
    "- Packing reads the files as a first epoch does (64 reads in flight, each straight into its row",
    "  group's buffer), writes each shard on local disk and copies it onto the volume while it is being",
    "  built (every shard's copy overlaps reading), and finds each file's offset from the page headers.",
    "  Here the volume is the VM's disk, whose writes ran at the `volume_write_MBps` above.",
    "- A packed stream fetches only its own row groups' byte ranges (one node-cache entry each, 24 in",
    "  flight, each its own open), so it starts after its first row group, not a whole shard.",
    "- A second-epoch figure is the median of epochs 2 to 4 of one process (one epoch alone moved by 10 %",
    "  from run to run here, more than packed and loose differ for Ray, whose consumer bounds both).",
    "- HF rows and torch items cross DataLoader process boundaries with their bytes (150 KiB each), which",
    "  costs the same over loose files and packs; FileStream's figure is what the core itself delivers.",
    "- The box is shared with other work (load average in the raw records): compare loose and packed",
    "  within this run; runs an hour apart moved single figures by up to 40%.",
    "- `pack, files/s` is one pack per run, bound by the VM's disk: in the last `before_after.py` run it",
    "  took 9.5 s on this code and 4.7 s on 2db3aae's (0.49); packs taking turns right after, three a",
    "  tree, took 4.25-4.49 s on this code and 4.24-5.78 s on 2db3aae's (medians 4,470 and 4,588 files/s).",
]


def plot(bars: dict[str, tuple[float, float | None]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(bars)
    fig, ax = plt.subplots(figsize=(12, 5.5))
    xs = range(len(names))
    first = [bars[n][0] for n in names]
    second = [bars[n][1] or 0 for n in names]
    ax.bar([x - 0.2 for x in xs], first, 0.4, label="first epoch (from the volume)", color="#4c72b0")
    ax.bar([x + 0.2 for x in xs], second, 0.4, label="second epoch", color="#dd8452")
    for x, v in zip(xs, first):
        ax.text(x - 0.2, v * 1.05, fmt(v), ha="center", fontsize=7)
    for x, v in zip(xs, second):
        if v:
            ax.text(x + 0.2, v * 1.05, fmt(v), ha="center", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("files/s (log scale)")
    ax.set_xticks(list(xs), names, fontsize=7, rotation=15)
    ax.set_title("2,000 JPEGs of ~147 KiB on an emulated volume (10 ms per open, 200 MB/s per stream), 2 cores")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


TORCH_NOTES = [
    "## torch: what bounds a warm epoch",
    "",
    "- A warm epoch reads the 301 MB of cached copies in 50-70 ms, most of it the consumer's own open and",
    "  read of each 147 KiB copy (30-40 µs, more under load): the cache's share of a warm item is a tenth.",
    "- A warm pass is runs of hits: they are yielded straight from one lookup per chunk of up to 512 files",
    "  (`Cache.lookup_run`: the entry's path, the `stat` that finds the copy and checks its length, one",
    "  count), not through the window of reads ahead, which costs more than the hit itself; from the",
    "  first miss on, that window reads ahead as before. Per hit only the `stat` runs in a loop of",
    "  Python's: a chunk comes as columns (paths, sizes, mtimes), its files are made by `map`, and no row",
    "  or local path is made unless a file misses; the listing remembers the rows it decoded (up to",
    "  65,536; a longer share keeps none), so a later epoch decodes none, and each path is the same string every epoch, whose",
    "  hash the cache's lookup reuses. The first chunks are smaller (32, 64, ...), so a",
    "  worker's first item comes after a batch's worth of lookups. `utime` (1.0 µs) runs once a minute per",
    "  entry, never in these epochs; `verify=True` adds ~45 µs a hit (a read and a hash of the copy).",
    "- The reference does a path join, an `os.path.exists` and a dict lookup per item. In one process",
    "  (the first table below) our pass costs about half a µs an item less than its; the position",
    "  tag that resume needs adds under 0.1 µs an item (one state read a batch of 32, crossing as plain",
    "  tuples). The reference tags no batch over a wrapped dataset (its resume needs the dataset itself),",
    "  so the tag is ours alone: with nothing read, a warm epoch at 6 workers took 1.0-1.8 ms longer with",
    "  it than the same loader untagged (median of 40 epochs, two processes) while it looked the worker's",
    "  dataset up and built the grid's list every batch, and 0.7-1.5 ms since it finds the position's",
    "  method once per process and carries the pass's grid as a tuple made once.",
    "- In a DataLoader worker, which wakes for each pass with cold caches, every step costs more than in",
    "  that loop, and a pass's own steps most: a lookup per chunk (tens of µs each); an unshuffled",
    "  stream plans its share at its first pass only (~0.3 ms of CPU there) and keeps the plan. The",
    "  second table is each loader's CPU per warm item through its DataLoader with nothing read: it",
    "  counts them all, and other processes' load moves it less than it moves wall time.",
    "- One process's warm epochs agree within a few ms (`warm_epochs_s` in the raw records), but",
    "  processes differ by up to 15%: where the copies' pages land in memory moves a warm epoch by more",
    "  than the gap between the loaders. So both loaders run in one process, their warm epochs taking",
    "  turns; a run's ratio is the median of its paired epochs' (`paired_warm_ratios`), and the ratio",
    "  above is the median over runs, half of them with each loader first (`went_first`).",
    "- Copies written earlier read slower here, whoever wrote them: the same 2,000 files copied by",
    "  `sendfile` into two tmpfs folders one after the other, then read back in turns by plain",
    "  `open().read()`, took 1.30-1.36x as long from the first folder (three runs), and 1.00x when copied",
    "  file by file into both in turn; their paths' layout (flat, the reference's, ours) moved it by",
    "  under 2%. With each loader's cache as its timed cold epoch left it, the one that ran first lagged",
    "  in warm epochs: against a second of its own kind (`--twins`), the reference 1.20-1.24x, ours",
    "  1.29-1.30x; against each other, ours 0.83-0.89x when it filled its cache first and 0.94-1.10x when",
    "  the reference did. Filling both caches again in one epoch of both loaders in step did not help",
    "  (ours 0.85-0.94x when first): ours writes its copies several times faster, so they were still the",
    "  older. So before the warm epochs every copy of both caches is written again, the two caches'",
    "  k-th copies one after the other (same bytes, put in place by a rename), and the warm epochs read",
    "  copies of one age: then ours 0.94-1.01x when first, 0.91-1.02x when second (runs' medians).",
    "- Files also read faster in the order they were written: 2,000 files of 150 KB written in one",
    "  order, then read in it or shuffled, in turns, in one process: 48.1-52.2 ms against 50.9-56.1 ms",
    "  (three runs). The reference's cold epoch writes its copies in the order its workers read them;",
    "  ours writes them as its reads ahead complete, 32-64 in flight. Written again by name, the",
    "  reference's copies lay in its read order and ours did not. So each cache's copies are written",
    "  again in the order its loader's workers read them in the cold epoch (recorded by the consumer,",
    "  their k-th files in turn), and each process runs an even number of warm pairs, each loader first",
    "  in half of them.",
    "- The cache's layout shows only where a worker's caches are cold. A DataLoader worker reads a 147 KiB",
    "  copy between two items, which pushes what its pass touched out of the CPU's caches: the last two",
    "  rows of the first table time each loader's pass as worker 0 of 6 with each copy read as it comes",
    "  (its own time alone). Under the earlier layout (256 folders; names of 40 hex digits and the file's",
    "  name, 54 characters here) ours cost 5.58-5.85 µs an item there against the reference's 5.42-5.57,",
    "  although 0.6-1.2 µs less in the hot loops; in 16 folders under names of 31 hex digits (short",
    "  enough to stay inside the kernel's directory entry, and 16 folders stay in the CPU's caches)",
    "  3.84-4.44 against 4.69-4.84 (two runs of each tree in turns), 7.01 against 8.72 in the recorded",
    "  run. An in-process A/B of layouts (worker 0's pass, each copy read, 40 passes, three runs) put 256",
    "  folders of short names between the two, and one folder level with 16. Looking each copy up just",
    "  before its read, instead of a chunk at a time ahead, made the consumer's open after it cheaper",
    "  (0.5-0.9 µs) and the lookup dearer by as much or more (0.8-1.1 µs: each `stat` then runs cold):",
    "  not kept.",
    "- With nothing read (probe: 3 processes, 40 epochs in random turns, µs an item), the workers spent",
    "  6.11-10.05 for ours against 6.85-10.76 for the reference, and the main process's threads",
    "  4.15-6.30 against 3.94-6.47 (torch's own DataLoader over our dataset 5.85-9.33 and 3.88-5.64): the",
    "  loaders differ by under a µs an item, and the consumer's read of each copy, 30-40 µs for both, sets",
    "  a warm epoch.",
    "- Runs' ratios at 6 workers. Before both loaders' workers started ahead of either's cold epoch (two",
    "  runs of six processes on this code): 0.91-1.12, median 0.99, mean 1.00, split by which loader was",
    "  made first (ours first 0.97-1.12, median 1.04; ours second 0.91-1.00, median 0.97); the runs'",
    "  medians 1.02 and 0.97. Since (the recorded run, another of six processes and one of two):",
    "  0.95-1.08, median 1.03 (ours first 1.04, second 1.02); the runs' medians 1.03, 1.05 and 1.02. At",
    "  2 workers (ours) against the reference's 6: 1.02 and 1.00 before, 1.01, 1.00 and 1.04 since. The",
    "  loaders are a few per cent apart at most, ours ahead in its own CPU (the tables below), and one",
    "  process's warm epochs move by more than that: the ratio is a median of many.",
]

def torch_breakdown(data: dict) -> list[str]:
    """The tables of a warm item's steps and layers, and of each loader's own CPU per item, that bench_torch.py
    measures last."""
    records = data.get("torch", ({}, []))[1]
    out = []
    found = [r for r in records if r.get("system", "").startswith("warm item breakdown")]
    if found:
        steps = {k: v for k, v in found[-1].items() if k not in ("system", "files", "load_avg_1m")}
        out += ["", f"Measured by `bench_torch.py` ({found[-1]['system']}, {found[-1]['files']:,} files):", "",
                "| step or layer | µs an item |", "| --- | ---: |", *(f"| {k} | {v} |" for k, v in steps.items())]
    cpu = [r for r in records if r.get("system", "").startswith("loaders' own CPU")]
    if cpu:
        parts = {k: v for k, v in cpu[-1].items() if k != "system"}
        out += ["", f"And through each DataLoader ({cpu[-1]['system']}):", "",
                "| loader: where | µs an item |", "| --- | ---: |", *(f"| {k} | {v} |" for k, v in parts.items())]
    return out


RAY_NOTES = [
    "## Ray: what bounds a short execution",
    "",
    "- Ray Data 2.60 starts every execution with an empty resource budget: its autoscaling coordinator",
    "  answers asynchronously and the executor refreshes its limits at most once a second. Until then it",
    "  runs one read task at a time, sometimes with an idle gap between tasks, so the sub-second",
    "  executions here run their read tasks one after another. (`num_cpus=0` on the read tasks lets them",
    "  start together; over 4 turns it gained nothing beyond the noise here.)",
    "- With `include_bytes=True` every file's bytes cross Ray's object store and become a Python `bytes`",
    "  in the consumer; on 2 cores the consumer's copy dominates. The in-memory source makes the same",
    "  rows from bytes already in memory, with nothing to read: what Ray and this consumer cost by",
    "  themselves. It lands near `include_bytes` (above or below it from one run to the next), so what",
    "  separates `include_bytes` from 5,000 files/s here is Ray's and the consumer's share. Rows that",
    "  carry `local_path` leave the contents out of the object store, and the consumer opens the",
    "  node-local copy itself.",
    "- A fresh Ray worker runs its first full garbage collections (0.1-0.25 s each here) during its first",
    "  passes; every reader makes two untimed passes over the images first, so that the timed executions",
    "  meet workers in the steady state of a cluster that has been up a while.",
    "- The first executions over files miss 1,500 files/s on this machine (1,182 with `local_path` rows,",
    "  939 with `include_bytes`); the machine of earlier runs measured 1,573 and 1,149 for the same code.",
    "  The code before the readers' rework (2db3aae), run beside this code in one session",
    "  (`before_after.py --only ray`), measured 969 and 838 here, and Ray's own `read_parquet` ran at",
    "  two thirds of its earlier rate: the machine is slower, not the code.",
]

STALLS_NOTES = [
    "## Stalls: hedged reads",
    "",
    "- `bench_stalls.py` reads the 2,000 files cold through `FileStream` (one process, 64 fetch threads),",
    "  each round once as is and once with `NETVOL_HANG_PCT=0.05 NETVOL_HANG_MS=20000` (a read in 2,000",
    "  stuck for 20 s). Before hedging such a pass took 40.9 s against about 1 s: the ordered consumer",
    "  waited behind the stuck read.",
    "- A read the consumer waits for is hedged once it has run 4x the p95 of recent reads (per byte, each",
    "  counted with 2 MiB more for its fixed cost: for these files nearly the p95 of their times), at least",
    "  0.15 s (here the p95 is ~14 ms, so the floor rules): a stall costs the pass about 0.15 s plus",
    "  one read. Stalls are drawn at random per run (0, 1 or 2 in most rounds), hence the worst round.",
    "- Extra reads are counted by the netvol trace (opens beyond one per file) and agree with the",
    "  cache's `stats.hedged` in every round.",
]


MIXTURE_NOTES = [
    "## Mixtures: planning an epoch of 10^7 slots",
    "",
    "- `bench_mixture.py` plans one stream of an 8 x 6 grid in a fresh process, its first epoch and then",
    "  the next. The second epoch is the planner's own work (0.92-0.94 s of CPU in the two recorded runs",
    "  of this code). The first also pays for the process's first touches of the memory it plans in,",
    "  which on this VM cost up to ~5 ms of system time per MB (a probe: 0.78 s for the 160 MB of one",
    "  step): 2.07 and 2.37 s for the first epoch in those two runs, 1.98 and 2.25 s of it CPU. With",
    "  numpy's huge pages turned off for the process (`_set_madvise_hugepage(False)`, not the library's",
    "  call) the first epoch of 9f2bd84's planner, keeping one epoch, took 1.3-1.4 s against 2.3-3.2 s.",
    "  So the planner's peak memory is its first epoch's time here: `plan_peak_rss_mb` (498 MB) against",
    "  `inputs_peak_rss_mb` (215 MB), the process before planning (its synthetic listings).",
    "- The planner keeps one epoch (the last asked), built with temporaries of a few MB: a source's",
    "  picks in 32 bits, the slots' interleave in closed form (each pick's slot counted in whole",
    "  numbers, one scatter, no sort), each rank's slots sorted on their own for the deal order. With",
    "  9f2bd84's planner, which kept two epochs and built int64 arrays of the epoch's size for each",
    "  step, the same probe (`PLAN` of this script, runs in turns 5 s apart) took 3.32-3.59 s for the",
    "  first epoch and 1.80-2.17 s for the second, at 970 MB peak RSS; this one 1.00-1.46 s and",
    "  0.86-0.94 s at 511 MB, with the same plans (18,579 plans of 150 random mixtures compared).",
    "",
]


SCALE_NOTES = [
    "## Scale: 10^5 to 10^7 files",
    "",
    "- `bench_scale.py` runs each figure in a fresh process, for this tree's code and for the revision",
    "  before this work (`--old`, 429cf07) where that finishes: listings for planning and memory are",
    "  synthetic; listing itself is timed on a real tree of 10^6 one-byte files (1,000 folders) under",
    "  netvol with 20 ms per folder listing. Plans are for one stream of 8 ranks x 6 workers, shuffled,",
    "  `equalize=\"pad\"`; resume plans a stream of a run resumed twice (8x6, then 4x3, then 2x2).",
    "  Memory is PSS (`/proc/PID/smaps_rollup`) of a DataLoader's parent and its 6 workers after the",
    "  first item, against the workers of a DataLoader over a dataset that holds nothing.",
    "- What a worker holds at 10^7: the pages of the mapped listing it touched, shared by every process",
    "  that maps the file (7 here, 49 on a node of 8 ranks x 6 workers): planning reads the sizes and the",
    "  largest-first order (160 MB), reading its files maps their paths (the kernel maps 64 KB around each",
    "  page it faults in); its own plan (its items as Python ints, ~8 MB); and nothing copied from its",
    "  parent by the garbage collector (a worker freezes what it inherited before its first read).",
    "- The front doors' setup lists the real tree under netvol; a listing still running after 0.25 s",
    "  hands the folders not opened yet to worker processes (one per core, 2 here).",
    "",
    "**What 10^8 files would cost, step by step** (paper estimates from the 10^7 figures, linear unless said):",
    "",
    "- Listing: ~3 us of CPU per file (a `stat` and its Python objects) is 300 CPU-seconds, shared by up",
    "  to 8 worker processes on the lister's node (~40 s), plus the folders' round trips. The lister then",
    "  merges the workers' files as Python tuples, ~15 GB at that size. What would change: merge the",
    "  workers' arrays without tuples (a k-way merge of sorted arrays), and shard the listing by top folder",
    "  over the job's nodes, the pieces concatenated in folder order.",
    "- The listing file: ~7 GB (paths ~50 B each, sizes, mtimes, largest-first order), mapped, so a node",
    "  holds it once; sending it to other nodes through a process group's broadcast is the slow part",
    "  (a node that cannot see rank 0's cache lists for itself instead, or reads it from a volume copy).",
    "- Planning: a stream's plan reads every size and a stride of the largest-first order (1.6 GB of",
    "  shared pages) and builds arrays of its rank's share only (10^8 / 8 items: ~200 MB transient per",
    "  worker, 48 at once on a node). What would change: plan once per node and epoch, write each stream's",
    "  items to a file, and let workers map their own; or deal whole folders (units of 10^3-10^4 files).",
    "- Resume: a delivered-items mask is 100 MB per level; chains stay linear in their depth.",
    "- Cache: `prune` and `info` survey 10^8 entries into 1.6 GB of arrays: shard them by the 256 entry",
    "  folders (one folder at a time) at that size.",
]


SCALE_COLUMNS = [("plan_s", "plan, s"), ("resume_s", "resume, s"), ("first_item_s", "first item, s"),
                 ("worker_over_idle_mb", "worker PSS above idle, MB"), ("parent_pss_mb", "parent PSS, MB")]


def scale_table(records: list[dict]) -> list[str]:
    """One row per (code, files): the figures of bench_scale, and the listing of the real tree."""
    lines = ["| code | files | " + " | ".join(name for _, name in SCALE_COLUMNS) + " |",
             "| --- | ---: |" + " ---: |" * len(SCALE_COLUMNS)]
    for r in records:
        if "plan_s" in r:
            cells = [fmt(r[k]) if isinstance(r.get(k), (int, float)) else "-" for k, _ in SCALE_COLUMNS]
            lines.append(f"| {r['code']} | {r['files']:,} | " + " | ".join(cells) + " |")
    listed = [r for r in records if r.get("what") == "list"]
    if listed:
        lines += ["", "Listing a real tree of " + f"{listed[0]['files']:,} files (1,000 folders, 20 ms per folder): "
                  + ", ".join(f"{r['code']} {r['list_s']:.1f} s" for r in listed) + "."]
    doors = [r for r in records if r.get("what") == "doors"]
    if doors:
        lines += ["", "The front doors' setup over that tree (listing included, fresh process and cache each):", "",
                  "| code | HF streaming setup, s | HF PSS, MB | Ray datasource, s | Ray read tasks, s | Ray PSS, MB |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        keys = ("hf_setup_s", "hf_pss_mb", "ray_construct_s", "ray_tasks_s", "ray_pss_mb")
        for r in doors:
            lines.append(f"| {r['code']} | " + " | ".join(fmt(r[k]) if k in r else "-" for k in keys) + " |")
    return lines


def scale_plot(records: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (key, title) in zip(axes, [("plan_s", "plan of one stream, s"), ("resume_s", "resume plan, s"),
                                       ("worker_over_idle_mb", "PSS per worker above idle, MB")]):
        for code, style in (("new", "o-"), ("old", "s--")):
            pts = [(r["files"], r[key]) for r in records if r.get("code") == code and r.get(key)]
            if pts:
                ax.plot(*zip(*pts), style, label="this code" if code == "new" else "before")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("files in the listing")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


EMULATOR_NOTES = [
    "## The emulator",
    "",
    "`netvol/` replaced an emulator that lived outside the repository. So that the figures keep their",
    "meaning, the code of the commit before the change ran the benchmarks under both, in turn, benchmark by",
    "benchmark, in one session (`results/emulator_check.json`): the same code, the emulator it replaced,",
    "then netvol. Ratios to a baseline are to the baseline measured under the same emulator.",
    "",
    "| issue | measure | old emulator | netvol | netvol / old | ratio to baseline: old, netvol |",
    "| --- | --- | ---: | ---: | ---: | --- |",
]


def emulator_section(rows: list[dict]) -> list[str]:
    """The same code's headline figures under the emulator netvol replaced and under netvol."""
    out = list(EMULATOR_NOTES)
    for r in rows:
        old, new = r["old"], r["new"]
        change = f"{new / old:.2f}" if isinstance(old, (int, float)) and isinstance(new, (int, float)) and old else ""
        ratios = (f"{r['old_ratio']:.2f}×, {r['new_ratio']:.2f}×" if r["old_ratio"] is not None
                  and r["new_ratio"] is not None else "")
        shown = [x if isinstance(x, str) else "" if x is None else fmt(x) for x in (old, new)]
        out.append(f"| {r['issue']} | {r['measure']} | {shown[0]} | {shown[1]} | {change} | {ratios} |")
    return out


def before_after_section(folder: Path) -> list[str]:
    """The headline figures of the code before a change and of this code, measured in turns in one run."""
    runs = json.loads((folder / "revisions.json").read_text())["runs"]
    sides = {side: load(folder / side) for side in ("before", "after")}
    out = [
        "## Before and after",
        "",
        "`before_after.py --rev REV` ran each benchmark below as REV's own script on its own code (before) and as",
        "this tree's on this code (after), one after the other (which went first alternates from one benchmark to",
        "the next), on the same data under one netvol build; the figures above are the after side's. Where the",
        "target is an upper bound (≤), lower is better. These pairs, and the three tables after them, were measured",
        "before netvol emulated `preadv2` (d371f8a) and traced the files a process leaves open (36eadf1): on both",
        "sides, a copy by ranges of a file over 32 MiB (a pack's shards, an export's Parquet files) crossed the",
        "emulated volume with no round trip, no bandwidth bound and no trace, and bytes read through a descriptor",
        "held open to the end went uncounted; the figures above were measured with both.",
        "",
        "| benchmark (before, after; first) | measure | before | after | after ÷ before | ratio to baseline: before, after |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for name, revs in runs.items():
        rows = {side: {(r[0], r[1]): r for r in headline({name: sides[side][name]})[0]} for side in sides}
        label = f"{name} ({revs['before']}, {revs['after']}; {revs['first']})"
        for key, after in rows["after"].items():
            before = rows["before"].get(key)
            if before is None:
                continue
            values = [before[2], after[2]]
            shown = ["" if v is None or isinstance(v, str) else fmt(v) for v in values]
            change = f"{values[1] / values[0]:.2f}" if all(isinstance(v, (int, float)) and v for v in values) else ""
            ratios = (f"{before[4]:.2f}×, {after[4]:.2f}×" if before[4] is not None and after[4] is not None else "")
            out.append(f"| {label} | {key[1]} | {shown[0]} | {shown[1]} | {change} | {ratios} |")
    for name, what, after in (
            ("ray_before_after.json", "Ray's noisiest figures",
             "Caveat: these were measured before ray_before_after.py ran its processes outside the folder it is run "
             "from; run from the repository's root (as its usage line says), `-c` put this tree's air_core ahead of "
             "PYTHONPATH, and both sides may have run this code. To be measured again."),
            ("checksum_before_after.json", "A checksum on every copy (#42), the cold epoch alone",
             "A pair is one process of each tree, run one after the other; the spread of its ratios is the "
             "machine's: the same code measured 0.84-1.17x itself in 8 pairs. The after side took a checksum of "
             "every copy, hashed back from the page cache after the kernel's copy: short of the 0.97x the issue "
             "allows, so checksums stay under verify=True (the ledger's shared turns and the fewer system calls a "
             "copy makes, measured with it, stayed)."),
            ("delta_before_after.json", "The Delta export alone",
             "A run lasts 1.05-1.6 s from one process to the next, so two trees run minutes apart (the delta rows of "
             "the first table) differ by the machine's drift as much as by their code: a run of 12 rounds just "
             "before this one measured 0.93, this one 1.04. The export's code is 2db3aae's but for the Files API "
             "branch and the `Parts` it tells of each file written. The same drift moved hf's `Parquet, Arrow "
             "batches` row of the first table (0.83): four cold passes a tree taking turns right after "
             "(`bench_hf.py --run parquet --system uc-volume`, each tree's own script, fresh caches) measured "
             "medians of 6,641,708 rows/s on 2db3aae's code and 7,044,685 on this code (1.06), and of its Python "
             "rows 1,224,507 and 1,564,636 (1.28).")):
        ab = folder.parent / name
        if not ab.exists():
            continue
        r = json.loads(ab.read_text())
        out += ["", f"{what}, many fresh processes a tree taking turns (`{r['command']}`; before "
                f"{r['before']}, after {r['after']}), medians:", "",
                "| measure | samples a tree | before | after | after ÷ before |", "| --- | ---: | ---: | ---: | ---: |"]
        out += [f"| {f['measure']} | {f['samples']} | {fmt(f['before'])} | {fmt(f['after'])} | {f['ratio']:.2f}"
                + (f" (pairs {f['pairs'][0]:.2f}-{f['pairs'][1]:.2f})" if "pairs" in f else "") + " |"
                for f in r["figures"]]
        out += ["", after] if after else []
    return out


# The README's figures: the first of headline()'s rows whose issue and measure start so, in this order.
README_ROWS = [
    ("#2 core", "first epoch"), ("#2 core", "second epoch"),
    ("#6 torch", "first epoch"), ("#6 torch", "warm epochs"),
    ("#3 hf", "first epoch"), ("#3 hf", "second epoch"),
    ("#4 ray", "first execution, files/s (default"), ("#4 ray", "second execution, files/s (default"),
    ("pack", "first epoch, files/s (FileStream"),
]
README_START = "<!-- figures: start (benchmarks/render.py writes this table from benchmarks/results/) -->"
README_END = "<!-- figures: end -->"
TARGETS_HEADER = ["| issue | measure | ours | baseline | ratio | target | met |",
                  "| --- | --- | ---: | --- | ---: | --- | --- |"]


def target_row(row: tuple) -> str:
    """One of headline()'s rows as a Markdown table row; a target missed reads **no**."""
    issue, what, ours, base, ratio, target, met = row
    o = ours if isinstance(ours, str) else ("" if ours is None else fmt(ours))
    r = "" if ratio is None else f"{ratio:,.2f}×"
    m = "" if met is None else ("yes" if met else "**no**")
    return f"| {issue} | {what} | {o} | {base} | {r} | {target} | {m} |"


def readme_figures(data: dict) -> list[str]:
    """The README's table: a few of the targets' rows (README_ROWS), as RESULTS.md shows them."""
    rows, _ = headline(data)
    picked = [next(r for r in rows if r[0] == issue and r[1].startswith(what)) for issue, what in README_ROWS
              if any(r[0] == issue and r[1].startswith(what) for r in rows)]
    return [*TARGETS_HEADER, *map(target_row, picked)]


def with_readme_figures(readme: str, results: Path) -> str:
    """`readme` with the table between README_START and README_END made again from `results`."""
    start, end = readme.index(README_START) + len(README_START), readme.index(README_END)
    return readme[:start] + "\n" + "\n".join(readme_figures(load(results))) + "\n" + readme[end:]


def render(results: Path, md: Path, png: Path) -> None:
    """Write `md` and its plots (beside `png`) from `results`, and the figures of the README two folders
    above `md` (the repository's, for benchmarks/RESULTS.md). The part of `md` the documentation's
    performance page includes lies between the `--8<-- [start:results]` and `[end:results]` lines."""
    data = load(results)
    rows, bars = headline(data)
    plot(bars, png)
    lines = [
        "# Benchmark results",
        "",
        "<!-- --8<-- [start:results] -->",
        "Every figure below was measured by `benchmarks/run_all.py`; each benchmark runs the reference",
        "(`databricks-sdk-air`), the native readers of HF `datasets` and Ray Data, and ours in one run, on",
        "the same data, under the project's `netvol/` emulator (10 ms per open, 200 MB/s per open file, 20 ms per",
        "listing). The machine has 2 cores and 24 GiB. Compare ratios within a run, not absolute rates",
        "across machines.",
        "",
        "    TMPDIR=/dev/shm python benchmarks/run_all.py      # all; --only core,torch,hf,ray,delta; --render",
        "",
        "Caches (ours, the reference's, HF's, Ray's) sit under TMPDIR. On Databricks a node's cache is its",
        "local NVMe disk; this VM's virtual disk made page-cache writes cost up to 3x more CPU from one hour",
        "to the next (the core's cold epoch measured 1,300-3,700 files/s on it for the same code), so the",
        "runs below keep every system's cache in memory (/dev/shm) alike.",
        "",
        "![files per second](results.png)",
        "",
        "## Targets",
        "",
        *TARGETS_HEADER,
    ]
    lines += map(target_row, rows)
    compared = results / "before_after"
    if (compared / "revisions.json").exists():
        lines += ["", *before_after_section(compared)]
    check = results / "emulator_check.json"
    if check.exists():
        lines += ["", *emulator_section(json.loads(check.read_text()))]
    lines += ["", *TORCH_NOTES, *torch_breakdown(data), "", *RAY_NOTES, "", *STALLS_NOTES]
    if "pack" in data:
        lines += ["", *pack_section(data["pack"][1], png.with_name("results_pack.png"))]
    if "lines" in data:
        lines += ["", *lines_section(data["lines"][1])]
    if "webdataset" in data:
        lines += ["", *webdataset_section(data["webdataset"][1])]
    if "media" in data:
        lines += ["", *media_section(data["media"][1])]
    if "mixture" in data:
        lines += ["", *MIXTURE_NOTES]
    if "resume" in data:
        lines += ["", *resume_section(data["resume"][1])]
    if "scale" in data:
        lines += ["", *SCALE_NOTES, "", *scale_table(data["scale"][1]), "", "![scale](scale.png)"]
        scale_plot(data["scale"][1], png.with_name("scale.png"))
    lines += ["", "<!-- --8<-- [end:results] -->", "", "## Raw records", ""]
    for name, (meta, records) in data.items():
        lines += [f"### {name}", "", f"`{meta['command']}` — {meta['wall_s']} s, load average {meta['load_avg']}"
                  " at the end", "", "```json"]
        lines += [json.dumps(r) for r in records]
        lines += ["```", ""]
    md.write_text("\n".join(lines))
    readme = md.parent.parent / "README.md"
    if readme.exists() and README_START in readme.read_text():
        readme.write_text(with_readme_figures(readme.read_text(), results))
