"""Where a tuning study lives: the optuna storage is the record of the run.

- default: SQLite file DIR/study.db (DIR is `--out`);
- `journal:PATH` or a path ending in .log/.journal: optuna's journal file (many processes on one
  machine, or a shared file system);
- any SQLAlchemy URL optuna accepts (sqlite:///…, postgresql://…) for many machines;
- `memory`: in this process only (benchmarks, experiments; nothing to resume from).

Everything is checked before any work (`check_storage`, `check_out`): an unknown scheme, a
missing driver, a file path whose directory does not exist, a file that is not a SQLite
database or an optuna journal, `--out` that is a file. hastune creates `--out` itself when its
parent directory exists, and never creates any other directory. A storage that stops
accepting writes mid-run (read-only, disk full, server gone) raises `StorageFailure`: one line,
the trials finished before it are in the storage.

Which process runs what, and what happens to the trials of dead processes: hastune.tune.claims.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import optuna

from hastune.errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"


class TuneError(Exception):
    """A tuning run could not go on (not bad input: the command exits 1). `str()` is the
    whole message."""


class StorageFailure(TuneError):
    """The study's storage refused a write or a read mid-run."""


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def is_journal(url: str) -> bool:
    return url.startswith("journal:") or url.endswith((".log", ".journal"))


def default_url(out: Path) -> str:
    return f"sqlite:///{(out / 'study.db').resolve()}"


def check_out(out: Path, option: str = "--out") -> None:
    """`out` is a directory, or can be made one without making any other directory."""
    if out.exists() and not out.is_dir():
        raise InputError(out, option, "exists and is not a directory",
                         f"give a directory for {option} (a new one is created)")
    if not out.exists():
        parent = out.absolute().parent
        if not parent.is_dir():
            raise InputError(out, option, *_missing(parent, option))
        if not os.access(parent, os.W_OK | os.X_OK) or not _can_create_in(parent):
            raise InputError(out, option, f"cannot create it: {parent} is not writable",
                             f"choose another {option}")
    elif not os.access(out, os.W_OK | os.X_OK) or not _can_create_in(out):
        raise InputError(out, option, "is not writable", f"choose another {option}")


def _can_create_in(folder: Path) -> bool:
    """Whether a directory can be made in `folder` (os.access says yes to root in /proc,
    /sys and read-only mounts): one is made there under a unique name and removed."""
    import tempfile

    try:
        os.rmdir(tempfile.mkdtemp(prefix=".hastune-check-", dir=folder))
    except OSError:
        return False
    return True


def _missing(parent: Path, option: str) -> tuple[str, str]:
    """(problem, fix) for a path whose directory is not there."""
    if parent.exists():
        return f"{parent} is a file, not a directory", f"give another path for {option}"
    return (f"directory {parent} does not exist",
            f"create it first (mkdir -p {parent}) or give another path for {option}")


def _check_file(path: Path, kind: str, out: Path | None) -> None:
    """A storage file: its directory exists, or is `out` (which hastune creates; nothing else
    is created for it); it is not a directory."""
    if path.is_dir():
        name = "study.log" if kind == "journal" else "study.db"
        raise InputError(path, "--storage", f"is a directory, not a {kind} file",
                         f"give a file path, e.g. {path / name}")
    parent = path.absolute().parent
    if not parent.is_dir():
        if out is not None and parent.resolve() == out.absolute().resolve():
            check_out(out)
            return
        raise InputError(path, "--storage", *_missing(parent, "--storage"))
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists()
                                                    and not os.access(path, os.R_OK | os.W_OK)):
        raise InputError(path, "--storage", "cannot be written (permissions)",
                         "fix the permissions of the file and its directory, or give another "
                         "path")


def _check_journal(path: Path, out: Path | None) -> None:
    _check_file(path, "journal", out)
    if not path.exists() or path.stat().st_size == 0:
        return
    import json

    try:
        with path.open("rb") as fh:
            first = fh.readline(1 << 20)
        ok = isinstance(json.loads(first), dict) and "op_code" in json.loads(first)
    except (OSError, ValueError):
        ok = False
    if not ok:
        raise InputError(path, "--storage", "is not an optuna journal file",
                         "give a journal written by hastune / optuna, or a new file name")


def _check_sqlite(database: str | None, out: Path | None) -> None:
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    _check_file(path, "SQLite", out)
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise InputError(path, "--storage", f"cannot be read ({exc.strerror})",
                         "fix its permissions or give another file") from None
    if head != SQLITE_MAGIC:
        raise InputError(path, "--storage", "is not a SQLite database",
                         "give a study.db written by hastune / optuna, or a new file name")


def check_storage(url: str | None, out: Path | None = None) -> None:
    """Refuse a storage URL that cannot work, before any work starts. None: the default
    (DIR/study.db, checked with --out). A file in `out` (--out, which hastune creates) is
    accepted before `out` exists."""
    if url is None or url == "memory":
        return
    if is_journal(url):
        if not url.removeprefix("journal:"):
            raise InputError(None, "--storage", "journal: needs a file path",
                             "use journal:PATH, e.g. journal:tune-out/study.log")
        _check_journal(Path(url.removeprefix("journal:")), out)
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    fix = ("use sqlite:///PATH, journal:PATH, memory, or a database URL such as "
           "postgresql://USER@HOST/DB")
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InputError(None, "--storage", f"{url!r} is not a storage URL", fix) from None
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        raise InputError(None, "--storage", f"unknown storage scheme {parsed.drivername!r}",
                         fix) from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        raise InputError(None, "--storage", f"the {parsed.drivername} driver is not installed "
                         f"({exc.name or exc})", f"pip install {exc.name or 'the driver'}, "
                         "or use sqlite:///PATH or journal:PATH") from None
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite(parsed.database, out)


def storage_file(url: str) -> Path | None:
    """The file a journal or SQLite storage URL names (None: memory, a server)."""
    if url == "memory":
        return None
    if is_journal(url):
        return Path(url.removeprefix("journal:"))
    if url.startswith("sqlite:///"):
        db = url.removeprefix("sqlite:///").partition("?")[0]
        return None if db in ("", ":memory:") or db.startswith("file:") else Path(db)
    return None


def open_storage(url: str | None, out: Path | None) -> optuna.storages.BaseStorage:
    if url is None:
        assert out is not None
        check_out(out)
        out.mkdir(exist_ok=True)
        url = default_url(out)
    check_storage(url, out)
    path = storage_file(url)
    if out is not None and path is not None and not path.parent.exists():
        out.mkdir()  # the file is in --out (check_storage refuses any other missing directory)
    if url == "memory":
        return optuna.storages.InMemoryStorage()
    if is_journal(url):
        from optuna.storages.journal import JournalFileBackend

        path = Path(url.removeprefix("journal:"))
        try:
            return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(path, "--storage", f"cannot open the journal ({exc})",
                             "give a writable journal file written by hastune / optuna, or a "
                             "new file name") from None
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    return _rdb(url, kwargs)


def _rdb(url: str, kwargs: dict, attempts: int = 8) -> optuna.storages.RDBStorage:
    """Open an RDB storage. Processes that open a new database at the same moment (workers, a
    second `hastune tune`, a monitoring script) race to create its tables; the loser sees
    "table … already exists", a duplicate schema-version row or "database is locked". Its next
    try finds the tables made. Anything else (a server that refuses, a database of another
    program or optuna version, a read-only file) is an InputError naming --storage."""
    from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError

    for i in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except (OperationalError, IntegrityError) as exc:
            transient = isinstance(exc, IntegrityError) or any(
                s in str(exc) for s in ("already exists", "database is locked"))
            if not transient or i == attempts - 1:
                raise _open_error(url, exc) from None
            time.sleep(0.05 * 2**i)
        except (DatabaseError, RuntimeError, ValueError) as exc:
            raise _open_error(url, exc) from None
    raise AssertionError("unreachable")


def _open_error(url: str, exc: Exception) -> InputError:
    msg = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    return InputError(None, "--storage", f"cannot open {url}: {msg}",
                      "check the URL, that the database is reachable and writable, and that it "
                      "holds optuna studies (or is new)")


def root_cause(exc: BaseException) -> str:
    """The first line of the innermost cause ("attempt to write a readonly database", not
    optuna's "An exception is raised during the commit")."""
    while exc.__cause__ is not None or (exc.__context__ is not None
                                        and not exc.__suppress_context__):
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    exc = getattr(exc, "orig", None) or exc
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def interrupted(exc: BaseException) -> bool:
    """Whether a storage error is a Ctrl-C: a KeyboardInterrupt while the storage was inside a
    write comes out wrapped in the storage's own error (its cause or context chain holds it),
    and is an interrupt to report as one (exit 130), not a storage that failed."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def storage_errors() -> tuple[type[BaseException], ...]:
    """What a storage raises when it stops accepting writes (the CLI turns these into one
    line)."""
    from sqlalchemy.exc import SQLAlchemyError

    return (StorageFailure, optuna.exceptions.StorageInternalError, SQLAlchemyError, OSError)
