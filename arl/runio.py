"""Files a run keeps: atomic writes, the one JSON writer, an fsynced log, one owner per folder.

Every file a user keeps (checkpoints, metrics, results, per-episode JSONL) is written to a
temp file beside its target, fsynced and renamed over it, so a crash, a full disk or a
kill leaves the old file or the new one, never a part of one. JSON goes through `plain`
(numpy, tuples, NaN made JSON) and `dumps_finite` (NaN refused). `claim_output_dir` gives a
run its folder: a lock held while it runs, and a refusal when the folder holds the files
of another run (unless the user asked to overwrite or to resume).
"""

from __future__ import annotations

import errno
import fnmatch
import json
import math
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np

from arl.errors import ArlError

LOCK_FILE = ".arl-lock"  # held (flock) while a run writes to the folder; holds the PID
MARKER_FILE = ".arl-run.json"  # which command's run the folder holds
TMP_PREFIX = ".tmp-"  # every temp file or folder; a claimed folder's leftovers are removed


def _reason(e: OSError) -> str:
    """A short reason for an OSError: 'No space left on device'."""
    return e.strerror or type(e).__name__


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask_mode() -> int:
    """The mode `open()` gives a new file: 0o666 under the process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def give_umask_modes(folder: str | Path) -> None:
    """Give each file directly in `folder` the mode a new file gets (0o666 under the umask):
    transformers' save_pretrained leaves model.safetensors readable by its owner only."""
    mode = _umask_mode()
    for p in Path(folder).iterdir():
        if p.is_file() and not p.is_symlink():
            os.chmod(p, mode)


def special(path: Path) -> bool:
    """Whether `path` (followed through symlinks) is something other than a regular file or a
    folder that exists: a device, a FIFO, a socket, an open descriptor (/dev/stdout)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` via a temp file, fsync and rename; an OSError is an ArlError.

    A symlink is followed (its target is replaced, the link kept); a device or a FIFO is
    written through, as a shell redirection would, never replaced. A new file gets the mode
    `open()` would give it (the umask's), a replaced one keeps its mode."""
    path = Path(path)
    if special(path):
        return _write_through(path, data)
    target = path.resolve() if path.is_symlink() else path
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = target.stat().st_mode & 0o7777 if target.is_file() else _umask_mode()
        fd, name = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{target.name}-", dir=target.parent)
        tmp = Path(name)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
        fsync_dir(target.parent)
    except OSError as e:
        raise ArlError(f"cannot write {path}: {_reason(e)}") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return path


def _write_through(path: Path, data: bytes) -> Path:
    """Write into a device or a FIFO in place (nothing to make atomic there)."""
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as e:
        raise ArlError(f"cannot write {path}: {_reason(e)}") from None
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 text to `path` atomically (temp file, fsync, rename)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def plain(obj: Any, ndigits: int | None = None) -> Any:
    """A JSON-ready copy: str keys, lists for tuples, Python numbers for numpy ones, None for
    NaN and infinities, floats rounded to `ndigits` places when given."""
    if isinstance(obj, dict):
        return {str(k): plain(v, ndigits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v, ndigits) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return obj if ndigits is None else round(obj, ndigits)
    return obj


# --- the one reader of what a user hands arl (doctor, report, stats, check template) -----------

MAX_INPUT_BYTES = 256 * 2**20  # a file read whole (JSON, a template) or a pipe's contents
MAX_LOG_BYTES = 2 * 2**30  # a JSONL log, read line by line (its records are what is kept)
MAX_LINE_BYTES = 64 * 2**20  # one line of a JSONL log


def _what(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_input(path: str | Path, label: str | None = None, named: bool = False) -> int:
    """Stat a file about to be read (never opening it, so a FIFO cannot block); its size.

    A missing file, a folder, a device, or a FIFO or socket found rather than `named` (the
    user named that very path, e.g. `<(cat metrics.jsonl)`) is one ArlError line."""
    label = label or str(path)
    if str(path) == "":
        raise ArlError("an empty path names no file")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ArlError(f"{label}: no such file") from None
    except OSError as e:
        raise ArlError(f"{label}: cannot read ({_reason(e)})") from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise ArlError(f"{label}: is a folder, not a file")
    if stat.S_ISREG(mode):
        return st.st_size
    if named and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return -1  # a pipe the user handed over: read to its end, bounded
    how = "" if named else " (name it itself on the command line to read a pipe)"
    raise ArlError(f"{label}: {_what(mode)}, not a regular file; not read{how}")


def _too_big(label: str, limit: int) -> ArlError:
    return ArlError(f"{label}: larger than {limit // 2**20} MiB; not read")


def read_input(
    path: str | Path, label: str | None = None, named: bool = False, limit: int | None = None
) -> bytes:
    """A regular file's bytes (or a named pipe's), at most `limit` (MAX_INPUT_BYTES) of them;
    anything else is one ArlError line (see check_input)."""
    label = label or str(path)
    limit = MAX_INPUT_BYTES if limit is None else limit
    if check_input(path, label, named) > limit:
        raise _too_big(label, limit)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ArlError(f"{label}: cannot read ({_reason(e)})") from None
    if len(data) > limit:
        raise _too_big(label, limit)
    return data


def read_input_text(
    path: str | Path, label: str | None = None, named: bool = False, limit: int | None = None
) -> str:
    """read_input as UTF-8 text (not UTF-8: one ArlError line)."""
    label = label or str(path)
    try:
        return read_input(path, label, named, limit).decode("utf-8")
    except UnicodeDecodeError:
        raise ArlError(f"{label}: not UTF-8 text") from None


def input_lines(
    path: str | Path, label: str | None = None, named: bool = False
) -> Iterator[tuple[int, str]]:
    """(line number, text) of a text file read line by line: at most MAX_LINE_BYTES a line and
    MAX_LOG_BYTES in all (a device, a FIFO found in a folder: one ArlError line)."""
    label = label or str(path)
    if check_input(path, label, named) > MAX_LOG_BYTES:
        raise _too_big(label, MAX_LOG_BYTES)
    total = 0
    try:
        with open(path, "rb") as f:
            for i, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
                total += len(raw)
                if total > MAX_LOG_BYTES:
                    raise _too_big(label, MAX_LOG_BYTES)
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                    raise ArlError(f"{label}:{i}: a line longer than {MAX_LINE_BYTES // 2**20} MiB")
                try:
                    yield i, raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise ArlError(f"{label}:{i}: not UTF-8 text") from None
    except OSError as e:
        raise ArlError(f"{label}: cannot read ({_reason(e)})") from None


def read_json(path: str | Path, label: str | None = None, named: bool = False) -> Any:
    """Parse a JSON file, or raise one ArlError line naming `label` (default: the path)."""
    label = label or str(path)
    text = read_input_text(path, label, named)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ArlError(f"{label}:{e.lineno}: invalid JSON ({e.msg})") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise ArlError(f"{label}: invalid JSON ({_one_line_of(e)})") from None
    except RecursionError:
        raise ArlError(f"{label}: JSON nested too deeply") from None


def _one_line_of(e: Exception) -> str:
    return " ".join(str(e).split())[:120]


def dumps_finite(obj: Any, indent: int | None = None) -> str:
    """JSON text, refusing NaN and infinities (they are not JSON; readers choke on them)."""
    try:
        return json.dumps(obj, indent=indent, allow_nan=False)
    except ValueError as e:
        raise ArlError(f"refusing to write a non-finite number as JSON ({e})") from None


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Write `obj` as indented JSON atomically; NaN or inf anywhere is an ArlError."""
    return atomic_write_text(path, dumps_finite(obj, indent=2) + "\n")


def append_jsonl(f: IO[str], record: dict) -> None:
    """Append one JSON line and fsync it: a kill loses at most the line being written."""
    f.write(dumps_finite(record) + "\n")
    f.flush()
    os.fsync(f.fileno())


def read_jsonl(path: str | Path, named: bool = False) -> list[dict]:
    """The records of an append-only log, read line by line (input_lines); a torn last line
    (a kill mid-write: no newline after it) is dropped. Any other unreadable line is an
    ArlError naming it."""
    records = []
    for i, line in input_lines(path, str(path), named):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if not line.endswith("\n"):  # the last line, cut short
                break
            raise ArlError(f"{path}:{i}: corrupt line") from None
        if not isinstance(row, dict):
            raise ArlError(f"{path}:{i}: expected a JSON object")
        records.append(row)
    return records


def check_writable(path: str | Path) -> Path:
    """Fail now, before any work, if a file cannot be created at `path` (or, for a device or
    a FIFO, written to)."""
    if str(path) == "":
        raise ArlError("cannot write to an empty path")
    path = Path(path)
    if path.is_dir():
        raise ArlError(f"cannot write {path}: it is a directory")
    if special(path):
        if not os.access(path, os.W_OK):
            raise ArlError(f"cannot write {path}: Permission denied")
        return path
    path = path.resolve() if path.is_symlink() else path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(prefix=TMP_PREFIX, dir=path.parent):
            pass
    except OSError as e:
        raise ArlError(f"cannot write {path}: {_reason(e)}") from None
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True


@contextmanager
def _lock(folder: Path) -> Iterator[None]:
    """Hold `folder/.arl-lock` for the block; another live holder is an ArlError.

    flock (POSIX) is released by the kernel when its process dies, even by SIGKILL, so a
    lock can never go stale; where flock is missing, the PID in the file decides.
    """
    path = folder / LOCK_FILE
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        fcntl = None
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            holder = int(os.read(fd, 32).decode() or 0)
        except ValueError:
            holder = 0
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                who = f"pid {holder}" if holder else "another process"
                raise ArlError(f"{folder}: in use by another arl run ({who})") from None
        elif holder and holder != os.getpid() and _pid_alive(holder):
            raise ArlError(f"{folder}: in use by another arl run (pid {holder})")
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the flock; the file stays (unlinking it would race)


def _owned(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _read_marker(folder: Path) -> str | None:
    try:
        kind = json.loads((folder / MARKER_FILE).read_text(encoding="utf-8"))["kind"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return kind if isinstance(kind, str) else None


def _claim(
    folder: Path, kind: str, owned: Sequence[str], overwrite: bool, reuse: bool, hint: str
) -> None:
    """Refuse, clear or keep the folder's old files (see claim_output_dir); lock held."""
    entries = [
        p
        for p in folder.iterdir()
        if p.name not in (LOCK_FILE, MARKER_FILE) and not p.name.startswith(TMP_PREFIX)
    ]
    marker = _read_marker(folder)
    foreign = sorted(p.name for p in entries if not _owned(p.name, owned))
    same = bool(entries) and (marker == kind or (marker is None and not foreign))
    if entries and not (same and reuse):
        if foreign:
            who = f"a run of `arl {marker}`" if marker and marker != kind else "other files"
            raise ArlError(f"--out {folder}: holds {who} (e.g. {foreign[0]}); use another --out")
        if not overwrite:
            first = sorted(p.name for p in entries)[0]
            raise ArlError(
                f"--out {folder}: holds an earlier run's files (e.g. {first}); "
                f"use another --out, or --overwrite to replace them{hint}"
            )
        for p in entries:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for p in folder.glob(f"{TMP_PREFIX}*"):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    atomic_write_json(folder / MARKER_FILE, {"kind": kind})


@contextmanager
def claim_output_dir(
    path: str | Path,
    kind: str,
    owned: Sequence[str],
    *,
    overwrite: bool = False,
    reuse: bool = False,
    hint: str = "",
) -> Iterator[Path]:
    """Own the folder `path` for a run of `kind` (e.g. "train pg") for the `with` block.

    The folder is created and locked (a second run on it is refused while this one lives).
    Files that match none of the `owned` patterns, or a run of another kind, are refused.
    An earlier run of the same kind is refused unless `reuse` (a resume, or a command that
    rewrites every file it owns) keeps it or `overwrite` deletes its `owned` files (nothing
    else). Temp files a killed run left are removed. `hint` ends the refusal's message.
    """
    folder = Path(path)
    try:
        if folder.exists() and not folder.is_dir():
            raise ArlError(f"--out {folder}: exists and is not a directory")
        created = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        empty = not any(p.name not in (LOCK_FILE, MARKER_FILE) for p in folder.iterdir())
        lock = _lock(folder)
        lock.__enter__()
    except OSError as e:
        raise ArlError(f"--out {folder}: {_reason(e)}") from None
    try:
        try:
            _claim(folder, kind, owned, overwrite, reuse, hint)
        except OSError as e:
            raise ArlError(f"--out {folder}: {_reason(e)}") from None
        yield folder
    except BaseException:
        if empty:  # refused before it wrote anything: leave no claimed, empty folder behind
            _release(folder, created)
        raise
    finally:
        lock.__exit__(None, None, None)


def _release(folder: Path, created: bool) -> None:
    """Undo the claim of a folder the run wrote nothing to (its marker; the folder if new)."""
    if any(p.name not in (LOCK_FILE, MARKER_FILE) for p in folder.iterdir()):
        return
    (folder / MARKER_FILE).unlink(missing_ok=True)
    if created:
        (folder / LOCK_FILE).unlink(missing_ok=True)
        try:
            folder.rmdir()
        except OSError:
            pass
