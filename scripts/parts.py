"""Move a file that is too big for one upload in parts, and put it back together, verified.

An offline GPU host takes a limited upload per command, the checkout's tracked files included
(docs/scaling.md, "The cifar size on an offline GPU host"). A file larger than the room left
travels in parts over several commands into an ignored folder, and is joined there once every
part has arrived:

    python scripts/parts.py split .gpu/send/cifar100/train.webp.npz .gpu/parts --max-mib 28  # here
    python scripts/parts.py join .gpu/parts/train.webp.npz.manifest.json .gpu/store            # host

``split`` writes ``<name>.partNN`` files and ``<name>.manifest.json`` (each part's size and
SHA-256, and the whole file's). ``join`` refuses a missing or damaged part, naming it, and
writes the joined file atomically only when its SHA-256 is the manifest's. Standard library
only: the host need not have this project installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

CHUNK = 1 << 20


class PartsError(RuntimeError):
    """A part is missing or damaged, or the joined file does not match its manifest."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def split(source: str | os.PathLike, folder: str | os.PathLike, max_mib: float = 16.0) -> Path:
    """Cut ``source`` into parts of at most ``max_mib`` MiB in ``folder``; returns the manifest."""
    source, folder = Path(source), Path(folder)
    if not source.is_file():
        raise PartsError(f"{source} is not a file: give the file to split")
    if not max_mib * (1 << 20) >= 1:
        raise PartsError(f"--max-mib {max_mib} must be at least one byte (1 / 1048576 MiB)")
    folder.mkdir(parents=True, exist_ok=True)
    size, limit = source.stat().st_size, int(max_mib * (1 << 20))
    parts = []
    with open(source, "rb") as f:
        for index in range(max(1, -(-size // limit))):
            part = folder / f"{source.name}.part{index:02d}"
            part.write_bytes(f.read(limit))
            parts.append({"file": part.name, "bytes": part.stat().st_size, "sha256": _sha256(part)})
    manifest = folder / f"{source.name}.manifest.json"
    manifest.write_text(json.dumps({"name": source.name, "bytes": size, "sha256": _sha256(source),
                                    "parts": parts}, indent=1) + "\n")
    return manifest


def _manifest(path: Path) -> dict:
    if not path.is_file():
        raise PartsError(f"{path} does not exist: copy the manifest beside the parts first")
    try:
        spec = json.loads(path.read_text())
        spec["parts"], spec["name"], spec["sha256"]
    except (ValueError, KeyError, TypeError) as err:
        raise PartsError(f"{path} is not a manifest written by split ({err}); split the file again") from None
    return spec


def missing(manifest: str | os.PathLike) -> list[str]:
    """The parts named by ``manifest`` that are absent beside it or damaged."""
    manifest = Path(manifest)
    spec = _manifest(manifest)
    bad = []
    for part in spec["parts"]:
        path = manifest.parent / part["file"]
        if not path.is_file() or path.stat().st_size != part["bytes"] or _sha256(path) != part["sha256"]:
            bad.append(part["file"])
    return bad


def join(manifest: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """Join the parts of ``manifest`` into ``folder/<name>``, atomically, after checking each
    part and the whole file's SHA-256."""
    manifest, folder = Path(manifest), Path(folder)
    spec = _manifest(manifest)
    bad = missing(manifest)
    if bad:
        raise PartsError(f"{len(bad)} of {len(spec['parts'])} parts are missing or damaged beside {manifest}: "
                         f"{', '.join(bad)}; send them again and rerun join")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / spec["name"]
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{spec['name']}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in spec["parts"]:
                out.write((manifest.parent / part["file"]).read_bytes())
        if _sha256(Path(tmp)) != spec["sha256"]:
            raise PartsError(f"the joined {spec['name']} does not match its manifest's SHA-256; split it again")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("split", help="cut a file into verified parts")
    p.add_argument("source")
    p.add_argument("folder")
    p.add_argument("--max-mib", type=float, default=16.0, help="largest part in MiB (default 16)")
    p = sub.add_parser("join", help="join the parts of a manifest, verified")
    p.add_argument("manifest")
    p.add_argument("folder")
    p = sub.add_parser("check", help="list the parts still missing or damaged")
    p.add_argument("manifest")
    args = parser.parse_args(argv)
    try:
        if args.command == "split":
            print(split(args.source, args.folder, args.max_mib))
        elif args.command == "join":
            print(join(args.manifest, args.folder))
        else:
            bad = missing(args.manifest)
            print("complete" if not bad else "missing or damaged: " + " ".join(bad))
            return 1 if bad else 0
    except PartsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
