"""Files mode: the features of a file row and the Arrow table of a batch of files."""

from __future__ import annotations

import os
from collections import Counter
from typing import Sequence

import datasets
import pyarrow as pa

from air_core.doors import AirError, CachedFile, Manifest, OptionError

DECODES = ("path", "bytes", "text", "image", "audio")


def label_names(manifest: Manifest) -> list[str]:
    """The class folders: each file's parent folder name, sorted (as imagefolder does)."""
    loose = next((p for p in manifest.paths if "/" not in p), None)
    if loose is not None:
        raise OptionError(
            f"labels=True takes each file's parent folder as its class, but {manifest.root}/{loose} "
            "lies in no class folder: put every file under a folder named for its class"
        )
    return sorted({_parent(p) for p in manifest.paths})


def check_media(manifest: Manifest, decode: str) -> None:
    """Refuse decode='image' / 'audio' over files whose extension is not one imagefolder / audiofolder reads.

    Found now, by name, rather than by the decoder at the first such row, mid-pass.
    """
    if decode not in ("image", "audio"):
        return
    from datasets.packaged_modules.audiofolder.audiofolder import AudioFolder
    from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

    known = {e.lower() for e in (ImageFolder if decode == "image" else AudioFolder).EXTENSIONS}
    others = [p for p in manifest.paths if os.path.splitext(p)[1].lower() not in known]
    if others:
        ext = Counter(os.path.splitext(p)[1] for p in others).most_common(1)[0][0]
        hint = f"exclude='*{ext}'" if ext else "exclude="
        verb = "is" if len(others) == 1 else "are"
        raise OptionError(
            f"decode={decode!r} reads {decode} files, but {len(others)} of the {len(manifest)} files under "
            f"{manifest.root} {verb} not, by their extension (e.g. {', '.join(others[:3])}): leave them out "
            f"with {hint}, or read every file with decode='bytes'"
        )


def features(decode: str, labels: Sequence[str] | None) -> datasets.Features:
    """path (volume path), local_path (cached copy), size, the decoded column, and label."""
    cols = {
        "path": datasets.Value("string"),
        "local_path": datasets.Value("string"),
        "size": datasets.Value("int64"),
    }
    if decode == "bytes":
        cols["bytes"] = datasets.Value("binary")
    elif decode == "text":
        cols["text"] = datasets.Value("string")
    elif decode == "image":
        cols["image"] = datasets.Image()
    elif decode == "audio":
        cols["audio"] = datasets.Audio()
    if labels is not None:
        cols["label"] = datasets.ClassLabel(names=list(labels))
    return datasets.Features(cols)


def table(
    files: Sequence[CachedFile], manifest: Manifest | None, features: datasets.Features, schema: pa.Schema,
    decode: str,
    *,
    embed_media: bool = False,
) -> pa.Table:
    """One Arrow table of rows for `files`, in order (`schema`: `features.arrow_schema`, made once).

    Image and audio rows point at the node-local copy, decoded where the row is
    consumed; with `embed_media` (rows bound for datasets' Arrow cache) they carry the bytes.
    `manifest` names the files' class folders, when `features` has a label.
    """
    cols: dict[str, list] = {
        "path": [f.path for f in files],
        "local_path": [f.local_path for f in files],
        "size": [f.size for f in files],
    }
    if decode == "bytes":
        cols["bytes"] = [f.read_bytes() for f in files]
    elif decode == "text":
        cols["text"] = [_text(f) for f in files]
    elif decode in ("image", "audio"):
        # A file the full cache did not admit is carried as bytes too.
        cols[decode] = [{"path": f.path, "bytes": f.read_bytes()} if embed_media or f.data is not None
                        else {"path": f.local_path, "bytes": None} for f in files]
    if "label" in features:
        index = {name: k for k, name in enumerate(features["label"].names)}
        cols["label"] = [index[_parent(manifest.paths[f.index])] for f in files]
    return pa.Table.from_pydict(cols, schema=schema)


def _parent(rel_path: str) -> str:
    return rel_path.rsplit("/", 2)[-2]


def _text(f: CachedFile) -> str:
    try:
        return f.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise AirError(f"{f.path} is not UTF-8 text ({e}): use decode='bytes' for binary files") from None
