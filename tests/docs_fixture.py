"""The data the documentation's code blocks read, and the rules those blocks follow.

Every ```python fence in docs/**/*.md and README.md runs as a test (tests/test_docs.py); other fences
(```bash, ```text, ```console, ```json, ```yaml) never run, so show output as ```text.

How a page runs
    A page is one namespace: its python blocks run top to bottom, so names carry over within a page,
    never across pages. Each page gets AIR_VOLUMES_ROOT pointing at a fresh copy of the tree below
    (write freely), a fresh AIR_CACHE_DIR, a fresh empty current directory, no RANK / WORLD_SIZE /
    LOCAL_RANK, and HF_HUB_OFFLINE=1: nothing is downloaded, so a Trainer or TRL block builds a tiny
    model itself. Blocks write paths as a user does ("/Volumes/main/ml/..."), never name
    AIR_VOLUMES_ROOT, never call ray.init(), and finish in seconds.

Markers: HTML comments on the line before a block, invisible on the site and on GitHub
    <!-- skip: next "reason" -->             the next block is not run; the reason is required and
                                               becomes the test's skip reason (sybil's syntax)
    <!-- skip: start "reason" --> ... <!-- skip: end -->        a run of blocks, likewise
    <!-- slow: next -->                       the next block runs in the `slow` tier (`make test`,
    <!-- slow: start --> ... <!-- slow: end -->  not `make test-fast`)
    Skip only what cannot run on one machine without credentials: a workspace, several machines, GPUs.
    Mark slow what uses Ray, torchrun or subprocesses, a Trainer or TRL run, DataLoader worker
    processes, or Spark. A page with slow blocks has two tests: the fast one runs its other blocks
    (which must not use names a slow block made), the slow one runs them all in order, with the test
    session's local Ray cluster started first when the page's blocks mention ray.

The tree, under /Volumes/main/ml/ (`build` writes it, `FILES` counts what tests may rely on)
    raw/images/{cat,dog}/NNN.jpg            12 JPEGs, 6 per class folder
    raw/splits/{train,validation,test}/{cat,dog}/NNN.jpg    8 / 4 / 4 JPEGs
    raw/captions/{train,test}/N.png + metadata.jsonl {file_name, caption}    HF's image-folder layout
    raw/llava/chat/llava.jsonl {id, image, conversations} naming raw/llava/images/partK/N.png
    tables/train/date=2024-01-0{1,2}/part-0.parquet    id, text, label; 200 rows, row groups of 50
    tables/hub/data/{train,validation}-00000-of-00001.parquet    the Hub's split names, same columns
    sft/chat/part-0.parquet, sft/code/part-0.jsonl    one schema: prompt, completion
    raw/{chat,code,safety}/*.jsonl (and raw/chat/drafts/)    {messages: [{role, content}, ...]}
    raw/logs/{a,b}.jsonl {id, level, message}; raw/csv/{a,b}.csv id,text,label; raw/text/{a,b}.txt
    raw/shards/shard-00000{0,1}.tar    WebDataset: KEY.jpg, KEY.cls, KEY.txt
    raw/tables/clicks    a Delta table (user_id, item_id, clicked, day), versions 0 and 1
    packs/images    raw/images packed by `air_core.pack`
Anything else under /Volumes/main/ml/ is free for a page to write.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

VOLUME = "main/ml"  # /Volumes/main/ml: catalog main, schema ml; each top folder below is a volume
FILES = {"raw/images": 12, "raw/splits": 16, "tables/train": 2, "raw/shards": 2}


def _jpeg(i: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (16, 16), ((37 * i) % 256, (91 * i) % 256, 128)).save(out, "JPEG")
    return out.getvalue()


def _png(i: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), ((53 * i) % 256, 0, 200)).save(out, "PNG")
    return out.getvalue()


def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def _images(ml: Path) -> None:
    for i in range(12):
        _write(ml / "raw/images" / ("cat", "dog")[i % 2] / f"{i:03d}.jpg", _jpeg(i))
    for split, n in (("train", 8), ("validation", 4), ("test", 4)):
        for i in range(n):
            _write(ml / "raw/splits" / split / ("cat", "dog")[i % 2] / f"{i:03d}.jpg", _jpeg(i + 50))
    for split, n in (("train", 6), ("test", 2)):
        for i in range(n):
            _write(ml / "raw/captions" / split / f"{i}.png", _png(i))
        _write(ml / "raw/captions" / split / "metadata.jsonl",
               _jsonl([{"file_name": f"{i}.png", "caption": f"a {split} picture, number {i}"} for i in range(n)]))
    records = []
    for i in range(6):
        _write(ml / f"raw/llava/images/part{i % 2}/{i}.png", _png(i + 20))
        records.append({"id": str(i), "image": f"part{i % 2}/{i}.png",
                        "conversations": [{"from": "human", "value": "<image>\nWhat is in the picture?"},
                                          {"from": "gpt", "value": f"A square of colour {i}."}]})
    _write(ml / "raw/llava/chat/llava.jsonl", _jsonl(records))


def _tables(ml: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def rows(start: int, n: int) -> pa.Table:
        ids = list(range(start, start + n))
        return pa.table({"id": pa.array(ids, pa.int64()), "text": [f"example {i}" for i in ids],
                         "label": pa.array([i % 2 for i in ids], pa.int64())})

    for k, day in enumerate(("2024-01-01", "2024-01-02")):
        path = ml / f"tables/train/date={day}/part-0.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows(100 * k, 100), path, row_group_size=50)
    for k, split in enumerate(("train", "validation")):
        path = ml / f"tables/hub/data/{split}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows(1000 * k, 40 if split == "train" else 10), path)
    sft = [{"prompt": f"Say {i} in words.", "completion": f"The number {i}."} for i in range(60)]
    (ml / "sft/chat").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(sft[:40]), ml / "sft/chat/part-0.parquet")
    _write(ml / "sft/code/part-0.jsonl", _jsonl(sft[40:]))


def _records(ml: Path) -> None:
    def chat(topic: str, i: int) -> dict:
        return {"messages": [{"role": "user", "content": f"A {topic} question, number {i}?"},
                             {"role": "assistant", "content": f"A {topic} answer, number {i}."}]}

    for folder, n in (("raw/chat", 3), ("raw/chat/drafts", 1), ("raw/code", 2), ("raw/safety", 1)):
        topic = folder.rsplit("/", 1)[-1]
        for f in range(n):
            _write(ml / folder / f"part-{f}.jsonl", _jsonl([chat(topic, 10 * f + i) for i in range(10)]))
    for f in ("a", "b"):
        _write(ml / f"raw/logs/{f}.jsonl",
               _jsonl([{"id": i, "level": ("info", "warn")[i % 2], "message": f"{f} event {i}"} for i in range(25)]))
        _write(ml / f"raw/csv/{f}.csv", "id,text,label\n" + "".join(f"{i},{f} row {i},{i % 2}\n" for i in range(25)))
        _write(ml / f"raw/text/{f}.txt", "".join(f"line {i} of {f}.txt\n" for i in range(25)))


def _webdataset(ml: Path) -> None:
    for s in range(2):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tf:
            for i in range(4):
                key = f"{s:02d}{i:04d}"
                for ext, data in (("jpg", _jpeg(100 + 4 * s + i)), ("cls", str(i % 2).encode()),
                                  ("txt", f"sample {key}".encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        _write(ml / f"raw/shards/shard-{s:06d}.tar", out.getvalue())


def _delta(ml: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    def clicks(start: int) -> pa.Table:
        ids = range(start, start + 30)
        return pa.table({"user_id": pa.array(list(ids), pa.int64()), "item_id": pa.array([i * 7 % 11 for i in ids], pa.int64()),
                         "clicked": [i % 3 == 0 for i in ids], "day": ["2024-01-01" if i < 30 else "2024-01-02" for i in ids]})

    path = ml / "raw/tables/clicks"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_deltalake(str(path), clicks(0))
    write_deltalake(str(path), clicks(30), mode="append")


def build(root: Path) -> Path:
    """Write the tree under `root` (a folder standing for /Volumes) and pack its images; returns `root`.

    `air_core.pack` reads through AIR_VOLUMES_ROOT, so it is pointed at `root` while packing and put
    back after; its cache goes to a folder beside `root` that is removed with it."""
    ml = root / VOLUME
    _images(ml)
    _tables(ml)
    _records(ml)
    _webdataset(ml)
    _delta(ml)
    saved = {k: os.environ.get(k) for k in ("AIR_VOLUMES_ROOT", "AIR_CACHE_DIR")}
    os.environ["AIR_VOLUMES_ROOT"], os.environ["AIR_CACHE_DIR"] = str(root), str(root.parent / "pack-cache")
    try:
        import air_core

        air_core.pack("/Volumes/main/ml/raw/images", "/Volumes/main/ml/packs/images")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return root
