"""The kernel cache trusts nothing it reads: a damaged, stale or hand-edited entry is compiled
again and rewritten, never loaded and never a crash; a cache folder that another user could
write to is refused; entries are fsynced before their rename, and a failed write leaves the
compile standing and no temporary file behind. CPU only: NVRTC needs no GPU."""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile

import pytest

from flashgnn._cuda import cache, compiler
from flashgnn._cuda.check import main as check_main
from tests.cuda.tiny_kernel import ELF_MAGIC, TINY, cubins

ARCH = "sm_80"
# what an entry's metadata holds besides the name expressions' symbol map and the log
ENTRY_FIELDS = [
    "source",
    "source_sha256",
    "arch",
    "options",
    "nvrtc",
    "name_expressions",
    "symbols",
    "log",
    "cubin_bytes",
    "cubin_sha256",
]


class Entry:
    """The cache entry of TINY for ARCH, as a fresh compile wrote it."""

    def __init__(self, cache_dir):
        self.compiled = compiler.compile_source(TINY, ARCH)
        (self.cubin,) = cubins(cache_dir)
        (self.meta,) = cache_dir.glob("*.json")

    def read_meta(self):
        return json.loads(self.meta.read_text())

    def write_meta(self, meta, resign: bool = False) -> None:
        """Write ``meta`` over the metadata; ``resign``: with its digest made to match, so that
        only the field checks can tell."""
        if resign:
            meta["sha256"] = cache.digest(meta["entry"])
        self.meta.write_text(json.dumps(meta))


@pytest.fixture
def entry(cache_dir, tiny_kernels, nvrtc_runs) -> Entry:
    return Entry(cache_dir)


def assert_recompiled_and_rewritten(entry: Entry, nvrtc_runs: list) -> None:
    runs = len(nvrtc_runs)
    out = compiler.compile_source(TINY, ARCH)
    assert len(nvrtc_runs) == runs + 1, "a damaged cache entry was loaded instead of recompiled"
    # a fresh compile: the same cubin and symbols (the log holds ptxas timings)
    assert (out.cubin, out.symbols) == (entry.compiled.cubin, entry.compiled.symbols)
    assert entry.cubin.read_bytes() == entry.compiled.cubin, "the entry was not rewritten"
    again = compiler.compile_source(TINY, ARCH)
    assert len(nvrtc_runs) == runs + 1, "the rewritten entry is not a cache hit"
    assert (again.cubin, again.symbols) == (entry.compiled.cubin, entry.compiled.symbols)


def test_an_intact_entry_is_a_hit(entry, nvrtc_runs):
    assert entry.compiled.cubin.startswith(ELF_MAGIC) and len(nvrtc_runs) == 1
    assert sorted(entry.read_meta()["entry"]) == sorted(ENTRY_FIELDS)
    hit = compiler.compile_source(TINY, ARCH)
    assert len(nvrtc_runs) == 1
    assert (hit.cubin, hit.symbols, hit.log) == (
        entry.compiled.cubin,
        entry.compiled.symbols,
        entry.compiled.log,
    )


# ---------------------------------------------------------------------------- damaged entries
@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(
            lambda b: b[: len(b) // 2] + bytes([b[len(b) // 2] ^ 1]) + b[len(b) // 2 + 1 :],
            id="tampered",
        ),
        pytest.param(lambda b: b[: len(b) // 2], id="truncated"),
        pytest.param(lambda b: b"", id="empty"),
        pytest.param(lambda b: b + b"\0" * 16, id="extended"),
        pytest.param(lambda b: b"\0" * len(b), id="zeroed"),
    ],
)
def test_a_damaged_cubin_is_recompiled(entry, nvrtc_runs, damage):
    entry.cubin.write_bytes(damage(entry.compiled.cubin))
    assert_recompiled_and_rewritten(entry, nvrtc_runs)


def test_a_cubin_swapped_for_another_valid_one_is_recompiled(entry, nvrtc_runs):
    other = compiler.compile_source(TINY, "sm_90").cubin
    assert other.startswith(ELF_MAGIC) and other != entry.compiled.cubin
    entry.cubin.write_bytes(other)
    assert_recompiled_and_rewritten(entry, nvrtc_runs)


def test_a_missing_cubin_is_recompiled(entry, nvrtc_runs):
    entry.cubin.unlink()
    assert_recompiled_and_rewritten(entry, nvrtc_runs)


@pytest.mark.parametrize(
    "text",
    [b"", b"{not json", b"\xff\xfe\x00", b"[]", b"null", b'"symbols"', b"{}", b'{"entry": []}'],
)
def test_metadata_that_is_not_an_entry_is_recompiled(entry, nvrtc_runs, text):
    entry.meta.write_bytes(text)
    assert_recompiled_and_rewritten(entry, nvrtc_runs)


@pytest.mark.parametrize("field", ["entry", "sha256"])
def test_metadata_missing_a_top_level_field_is_recompiled(entry, nvrtc_runs, field):
    meta = entry.read_meta()
    del meta[field]
    entry.write_meta(meta)
    assert_recompiled_and_rewritten(entry, nvrtc_runs)


@pytest.mark.parametrize("resign", [False, True], ids=["as-is", "resigned"])
@pytest.mark.parametrize("field", ENTRY_FIELDS)
def test_metadata_missing_a_field_is_recompiled(entry, nvrtc_runs, field, resign):
    meta = entry.read_meta()
    del meta["entry"][field]
    entry.write_meta(meta, resign)
    assert_recompiled_and_rewritten(entry, nvrtc_runs)


@pytest.mark.parametrize(
    "field, value",
    [
        ("source_sha256", "0" * 64),  # a stale entry of an older source
        ("arch", "sm_90"),
        ("nvrtc", "0.0"),
        ("name_expressions", ["scale<float>"]),
        ("cubin_bytes", 1),
        ("cubin_sha256", "0" * 64),
        ("log", None),
        ("symbols", []),
    ],
)
def test_metadata_with_a_wrong_value_is_recompiled(entry, nvrtc_runs, field, value):
    meta = entry.read_meta()
    meta["entry"][field] = value
    entry.write_meta(meta, resign=True)
    assert_recompiled_and_rewritten(entry, nvrtc_runs)


def test_a_rewritten_symbol_map_is_recompiled(entry, nvrtc_runs):
    """Swapping the mangled names would launch scale<double> for scale<float>; the entry's
    digest covers the map."""
    meta = entry.read_meta()
    symbols = meta["entry"]["symbols"]
    symbols["scale<float>"], symbols["scale<double>"] = (
        symbols["scale<double>"],
        symbols["scale<float>"],
    )
    entry.write_meta(meta)
    assert_recompiled_and_rewritten(entry, nvrtc_runs)


@pytest.mark.parametrize(
    "rewrite",
    [
        pytest.param(lambda s: s.pop("scale<double>"), id="a-name-missing"),
        pytest.param(lambda s: s.update({"scale<half>": "_Z5scaleI6__halfEvPT_x"}), id="extra"),
        pytest.param(lambda s: s.update({"scale<float>": ""}), id="empty-mangled-name"),
        pytest.param(lambda s: s.update({"scale<float>": 7}), id="not-a-string"),
    ],
)
def test_a_symbol_map_not_of_the_name_expressions_is_recompiled(entry, nvrtc_runs, rewrite):
    meta = entry.read_meta()
    rewrite(meta["entry"]["symbols"])
    entry.write_meta(meta, resign=True)
    assert_recompiled_and_rewritten(entry, nvrtc_runs)


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@root_only
@pytest.mark.parametrize("which", ["cubin", "meta"])
def test_entry_files_of_another_user_are_recompiled(entry, nvrtc_runs, which):
    os.chown(getattr(entry, which), 4321, 4321)
    assert_recompiled_and_rewritten(entry, nvrtc_runs)
    assert getattr(entry, which).stat().st_uid == os.geteuid()


# ---------------------------------------------------------------------------- the folder
def test_the_folder_and_the_parents_it_creates_are_private(
    tmp_path, tiny_kernels, nvrtc_runs, monkeypatch
):
    folder = tmp_path / "home" / "cache" / "flashgnn"
    monkeypatch.setenv("FLASHGNN_CACHE_DIR", str(folder))
    umask = os.umask(0o022)
    try:
        compiler.compile_source(TINY, ARCH)
    finally:
        os.umask(umask)
    for path in (folder, folder.parent, folder.parent.parent):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, f"{path} is not private"
    assert len(cubins(folder)) == 1


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757, 0o722, 0o1777], ids=oct)
def test_a_folder_others_can_write_to_is_refused(cache_dir, tiny_kernels, nvrtc_runs, mode):
    cache_dir.mkdir()
    os.chmod(cache_dir, mode)
    with pytest.raises(cache.UnsafeCacheDir) as refused:
        compiler.compile_source(TINY, ARCH)
    message = str(refused.value)
    assert "FLASHGNN_CACHE_DIR" in message and str(cache_dir) in message
    assert f"chmod 700 {cache_dir}" in message and "writable by group or others" in message
    assert not nvrtc_runs and not list(cache_dir.iterdir())


def test_a_planted_entry_in_a_world_writable_folder_is_not_loaded(entry, cache_dir, nvrtc_runs):
    os.chmod(cache_dir, 0o777)
    with pytest.raises(cache.UnsafeCacheDir):
        compiler.compile_source(TINY, ARCH)
    assert len(nvrtc_runs) == 1


@pytest.mark.parametrize("mode", [0o700, 0o750, 0o755], ids=oct)
def test_a_folder_only_its_owner_writes_to_is_used(cache_dir, tiny_kernels, nvrtc_runs, mode):
    cache_dir.mkdir()
    os.chmod(cache_dir, mode)
    compiler.compile_source(TINY, ARCH)
    compiler.compile_source(TINY, ARCH)
    assert len(nvrtc_runs) == 1 and len(cubins(cache_dir)) == 1


def test_a_folder_of_another_user_is_refused(cache_dir, tiny_kernels, nvrtc_runs, monkeypatch):
    cache_dir.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(cache_dir, 4321, 4321)
        owner = 4321
    else:  # not root: the folder is ours, so this process pretends to be someone else
        owner = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    with pytest.raises(cache.UnsafeCacheDir) as refused:
        compiler.compile_source(TINY, ARCH)
    message = str(refused.value)
    assert "FLASHGNN_CACHE_DIR" in message and str(cache_dir) in message
    assert f"belongs to uid {owner}" in message
    assert not nvrtc_runs


def test_check_reports_an_unsafe_folder_once(cache_dir, capsys):
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o777)
    assert check_main(["--check", "--arch", ARCH]) == 1
    err = capsys.readouterr().err
    assert err.count("FLASHGNN_CACHE_DIR") == 1 and f"chmod 700 {cache_dir}" in err


def test_a_cache_path_that_is_a_file_compiles_uncached(cache_dir, tiny_kernels, nvrtc_runs):
    cache_dir.write_text("not a folder")
    with pytest.warns(RuntimeWarning, match="cannot be used"):
        out = compiler.compile_source(TINY, ARCH)
    assert out.cubin.startswith(ELF_MAGIC) and set(out.symbols) == set(TINY.name_expressions)
    assert cache_dir.read_text() == "not a folder"


# ---------------------------------------------------------------------------- writing
def test_each_file_is_fsynced_before_its_rename(cache_dir, tiny_kernels, nvrtc_runs, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.fstat(fd).st_ino))
        real_fsync(fd)

    def replace(src, dst, **kwargs):
        events.append(("replace", os.stat(src).st_ino))
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    compiler.compile_source(TINY, ARCH)
    renamed = [i for i, (kind, _) in enumerate(events) if kind == "replace"]
    assert len(renamed) == 2, events  # the cubin and its metadata
    for i in renamed:
        assert ("fsync", events[i][1]) in events[:i], "a file was renamed into place unsynced"


@pytest.fixture
def full_disk(monkeypatch):
    """Temporary files of the cache open on /dev/full, where every write fails with ENOSPC;
    returns the paths mkstemp made."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    made = []
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        fd, path = real_mkstemp(*args, **kwargs)
        os.close(fd)
        made.append(path)
        return os.open("/dev/full", os.O_WRONLY), path

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    return made


def test_a_full_disk_skips_the_cache_write(cache_dir, tiny_kernels, nvrtc_runs, full_disk):
    with pytest.warns(RuntimeWarning, match="not written"):
        out = compiler.compile_source(TINY, ARCH)
    assert out.cubin.startswith(ELF_MAGIC) and set(out.symbols) == set(TINY.name_expressions)
    assert full_disk, "the cache did not try to write"
    assert not any(os.path.exists(p) for p in full_disk) and not list(cache_dir.iterdir())


def test_a_failed_fsync_skips_the_cache_write(cache_dir, tiny_kernels, nvrtc_runs, monkeypatch):
    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.warns(RuntimeWarning, match="not written"):
        out = compiler.compile_source(TINY, ARCH)
    assert out.cubin.startswith(ELF_MAGIC)
    assert not list(cache_dir.iterdir()), "a temporary file was left behind"


def test_metadata_not_written_leaves_a_cubin_that_is_recompiled(
    cache_dir, tiny_kernels, nvrtc_runs, monkeypatch
):
    """The cubin is written, its metadata is not: the next compile does not load the cubin."""
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, prefix="", **kwargs):
        if prefix.endswith(".json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_mkstemp(*args, prefix=prefix, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    with pytest.warns(RuntimeWarning, match="not written"):
        first = compiler.compile_source(TINY, ARCH)
    assert [f.suffix for f in cache_dir.iterdir()] == [".cubin"]
    monkeypatch.setattr(tempfile, "mkstemp", real_mkstemp)
    again = compiler.compile_source(TINY, ARCH)
    assert len(nvrtc_runs) == 2 and again.cubin == first.cubin
    assert sorted(f.suffix for f in cache_dir.iterdir()) == [".cubin", ".json"]
