"""scripts/parts.py: a file too big for one upload to a GPU host, split and joined, verified."""

import importlib.util
import os

import pytest

from frost_nb.paths import repo_root

spec = importlib.util.spec_from_file_location("parts", repo_root() / "scripts" / "parts.py")
parts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(parts)


def test_split_and_join_give_back_the_same_bytes(tmp_path):
    source = tmp_path / "train.npz"
    source.write_bytes(os.urandom(5 * 1024 + 7))
    manifest = parts.split(source, tmp_path / "parts", max_mib=2 / 1024)  # parts of 2 KiB
    assert sorted(p.name for p in (tmp_path / "parts").glob("*.part*")) == [f"train.npz.part0{i}" for i in range(3)]
    assert parts.missing(manifest) == []
    joined = parts.join(manifest, tmp_path / "there")
    assert joined.read_bytes() == source.read_bytes()
    assert [p.name for p in (tmp_path / "there").iterdir()] == ["train.npz"]  # no temporary file left


def test_join_names_a_missing_or_damaged_part_and_writes_nothing(tmp_path):
    source = tmp_path / "train.npz"
    source.write_bytes(os.urandom(4096))
    manifest = parts.split(source, tmp_path / "parts", max_mib=1 / 1024)
    (tmp_path / "parts" / "train.npz.part01").unlink()
    part2 = tmp_path / "parts" / "train.npz.part02"
    part2.write_bytes(b"x" + part2.read_bytes()[1:])
    assert parts.missing(manifest) == ["train.npz.part01", "train.npz.part02"]
    with pytest.raises(parts.PartsError, match=r"2 of 4 parts .*part01, train.npz.part02; send them again"):
        parts.join(manifest, tmp_path / "there")
    assert not (tmp_path / "there").exists() or not any((tmp_path / "there").iterdir())
    assert parts.main(["check", str(manifest)]) == 1
    assert parts.main(["join", str(manifest), str(tmp_path / "there")]) == 2


def test_join_refuses_a_whole_file_that_does_not_match_and_a_bad_manifest(tmp_path):
    import json

    source = tmp_path / "test.npz"
    source.write_bytes(os.urandom(3000))
    manifest = parts.split(source, tmp_path / "parts", max_mib=1 / 1024)
    spec = json.loads(manifest.read_text())
    spec["sha256"] = "0" * 64  # every part intact, the whole wrong (a manifest of another file)
    manifest.write_text(json.dumps(spec))
    with pytest.raises(parts.PartsError, match="does not match its manifest's SHA-256"):
        parts.join(manifest, tmp_path / "there")
    assert list((tmp_path / "there").iterdir()) == []  # no partial file, no temporary file
    manifest.write_text("{not json")
    with pytest.raises(parts.PartsError, match="is not a manifest written by split"):
        parts.missing(manifest)
    assert parts.main(["check", str(tmp_path / "absent.json")]) == 2
    with pytest.raises(parts.PartsError, match="at least one byte"):
        parts.split(source, tmp_path / "p2", max_mib=1e-9)
