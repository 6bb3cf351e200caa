"""Parse, extract and chunk files in worker processes, for ``manage.py ingest --jobs``.

Extraction is CPU-bound Python (lxml's tree walked into Markdown, chunking, stemming), so
it runs in a process pool, one worker per core by default; the calling process only writes
to the database (ADR 0030). Files go to the workers several per task (fewer round trips),
and only a bounded number of tasks is in flight per worker: the paths are consumed as an
iterator and results are yielded in order, so memory holds at most that window of files
whatever the folder's size. Results are plain data (strings, integers, tuples) so they
pickle cheaply; a chunk is its offsets, its text is sliced from the body again here.

If a worker dies (a parser's segfault, killed for memory), the files of the tasks that were
in flight are parsed again one at a time in a new pool: the one that kills its worker again
is that file's error ("its parser crashed"), and the rest go on. Re-parsing them in this
process instead would let that file kill the command. If a pool cannot start, the
remaining files are parsed in this process, after one message saying so.

No Django imports: workers import only this module and ``answers.ingestion``.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from .duplicates import body_signature
from .ingestion import (
    ChunkSpan,
    ExtractionError,
    chunk_text,
    extract_file,
    quiet_libraries,
    undecodable_path_reason,
)
from .search.stemming import stem_text

__all__ = [
    "FILES_PER_TASK",
    "TASKS_PER_WORKER",
    "ParseOptions",
    "ParsePool",
    "ParsedFile",
    "default_jobs",
    "files_parse",
]

# A task is a few dozen milliseconds of parsing: enough to make a round trip negligible,
# small enough that the workers stay evenly busy to the last file.
FILES_PER_TASK = 16
# Tasks queued per worker: one running, one waiting, so a worker never idles on a round trip.
TASKS_PER_WORKER = 2


@dataclass(frozen=True)
class ParsedFile:
    """One file's outcome: its text and chunk offsets, or why it could not be read."""

    key: str  # the source key: the file's absolute path
    title: str = ""
    body: str = ""
    spans: tuple[tuple[int, int], ...] = ()  # (start, end) of each chunk in ``body``
    # stem_text of the title and of each chunk, when asked (the SQLite index's input).
    stems: tuple[str, ...] = ()
    # body_signature(body): up to half of the writing process's work when it was computed
    # there, while the workers waited on it.
    near_signature: bytes = b""
    error: str = ""

    def chunk_spans(self) -> list[ChunkSpan]:
        """The chunks as ``chunk_text`` returned them (each text sliced from the body)."""
        body = self.body
        return [
            ChunkSpan(ordinal=n, start=start, end=end, text=body[start:end])
            for n, (start, end) in enumerate(self.spans)
        ]

    def known_stems(self) -> dict[str, str]:
        """Text -> its stems, for ``stemming.stems_known``; empty if none were computed."""
        if not self.stems:
            return {}
        texts = [self.title, *(self.body[start:end] for start, end in self.spans)]
        return dict(zip(texts, self.stems, strict=True))


@dataclass(frozen=True)
class ParseOptions:
    """What every worker needs to know: the chunk size, and whether to stem (SQLite)."""

    chunk_size: int
    stem: bool


def default_jobs() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on every platform
        return max(1, os.cpu_count() or 1)


def parse_file(path: str, options: ParseOptions) -> ParsedFile:
    """Extract and chunk one file; any failure is its ``error``, never an exception."""
    # The path becomes the source key: one that cannot be stored is this file's error, not
    # the failure of the batch written with it.
    if reason := undecodable_path_reason(path):
        return ParsedFile(key=path, error=reason)
    try:
        extracted = extract_file(Path(path))
    except ExtractionError as exc:
        return ParsedFile(key=path, error=str(exc))
    except OSError as exc:
        return ParsedFile(key=path, error=f"cannot read it ({exc.strerror or exc})")
    except Exception as exc:  # a parser's own bug must not stop the other files
        return ParsedFile(key=path, error=f"could not be read ({type(exc).__name__}: {exc})")
    spans = chunk_text(extracted.body, size=options.chunk_size)
    stems: tuple[str, ...] = ()
    if options.stem:
        stems = (stem_text(extracted.title), *(stem_text(span.text) for span in spans))
    return ParsedFile(
        key=path,
        title=extracted.title,
        body=extracted.body,
        spans=tuple((span.start, span.end) for span in spans),
        stems=stems,
        near_signature=body_signature(extracted.body),
    )


def parse_files(paths: list[str], options: ParseOptions) -> list[ParsedFile]:
    """One task: several files, the libraries silenced once for all of them."""
    with quiet_libraries():
        return [parse_file(path, options) for path in paths]


def _tasks(paths: Iterable[Path], size: int) -> Iterator[list[str]]:
    task: list[str] = []
    for path in paths:
        task.append(str(path.resolve()))
        if len(task) == size:
            yield task
            task = []
    if task:
        yield task


@dataclass
class ParsePool:
    """Workers that parse files; use as a context manager, then ``parse``.

    ``jobs`` 1 parses in this process (no pool at all). ``on_fallback`` receives the one
    message said when the pool cannot start or dies.
    """

    jobs: int
    chunk_size: int
    stem: bool = False
    files_per_task: int = FILES_PER_TASK
    # Bytes of address space a worker may take beyond what it starts with (0: no limit).
    memory_limit: int = 0
    on_fallback: Callable[[str], None] = print
    _executor: Executor | None = field(default=None, init=False, repr=False)
    _fell_back: bool = field(default=False, init=False, repr=False)
    _restarted: bool = field(default=False, init=False, repr=False)

    def __enter__(self) -> ParsePool:
        if self.jobs > 1:
            self._start()
        return self

    def _start(self) -> None:
        try:
            # fork where there is one: a worker starts in milliseconds and does not
            # import the caller's __main__ again (spawn and forkserver run an unguarded
            # script's top level once more in every worker). Workers never touch the
            # inherited database connections, and exit with os._exit (no finalizers).
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            self._executor = ProcessPoolExecutor(
                max_workers=self.jobs,
                mp_context=context,
                initializer=_worker_start,
                initargs=(self.memory_limit,),
            )
        except (OSError, ValueError, NotImplementedError) as exc:
            self._fall_back(f"cannot start {self.jobs} worker processes ({exc})")

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    @property
    def pooled(self) -> bool:
        """Whether files are (still) parsed in worker processes."""
        return self._executor is not None

    def worker_pids(self) -> list[int]:
        """The workers' process ids (for tests that kill one)."""
        processes = getattr(self._executor, "_processes", None) or {}
        return sorted(processes)

    def parse(self, paths: Iterable[Path]) -> Iterator[ParsedFile]:
        """Each file's ``ParsedFile``, in the order of ``paths``, which is read lazily."""
        options = ParseOptions(chunk_size=self.chunk_size, stem=self.stem)
        window: deque[_InFlight] = deque()
        for task in _tasks(paths, self.files_per_task):
            window.append(self._submit(task, options))
            # In order, at most TASKS_PER_WORKER per worker ahead of the one yielded next.
            while len(window) >= self.jobs * TASKS_PER_WORKER or not self.pooled:
                yield from self._result(window.popleft(), options)
                if not window:
                    break
        while window:
            yield from self._result(window.popleft(), options)

    def _submit(self, task: list[str], options: ParseOptions) -> _InFlight:
        executor = self._executor
        if executor is None:
            return _InFlight(task, None, None)
        try:
            return _InFlight(task, executor.submit(parse_files, task, options), executor)
        except (BrokenProcessPool, RuntimeError) as exc:
            self._restart(executor, exc)
            return _InFlight(task, None, executor)

    def _result(self, item: _InFlight, options: ParseOptions) -> list[ParsedFile]:
        if item.future is not None:
            try:
                return item.future.result()
            except BrokenProcessPool as exc:
                self._restart(item.executor, exc)
        elif item.executor is None:  # submitted while no pool ran: parsed here
            return parse_files(item.task, options)
        return [self._isolated(path, options) for path in item.task]

    def _isolated(self, path: str, options: ParseOptions) -> ParsedFile:
        """One file of a task whose worker died, alone in the pool: if its worker dies
        again, this file killed it."""
        executor = self._executor
        if executor is None:
            return parse_files([path], options)[0]
        try:
            return executor.submit(parse_files, [path], options).result()[0]
        except (BrokenProcessPool, RuntimeError) as exc:
            self._restart(executor, exc)
            return ParsedFile(key=path, error=f"its parser crashed ({_stopped(exc)})")

    def _restart(self, executor: Executor | None, exc: BaseException) -> None:
        """A new pool in place of ``executor``, which died (once, however many of its tasks
        report it); if none can start, parse here from now on."""
        if executor is None or executor is not self._executor:
            return
        executor.shutdown(wait=False, cancel_futures=True)
        self._executor = None
        if not self._restarted:
            self._restarted = True
            self.on_fallback(
                f"a worker process stopped ({_stopped(exc)}); the files it had are parsed "
                "again one at a time in new worker processes."
            )
        self._start()

    def _fall_back(self, reason: str) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if not self._fell_back:  # said once, though every task in flight fails with it
            self._fell_back = True
            self.on_fallback(f"{reason}; parsing the remaining files in this process.")


@dataclass(frozen=True)
class _InFlight:
    """A task, its future (None: parse it here, or again), and the pool it went to."""

    task: list[str]
    future: Future[list[ParsedFile]] | None
    executor: Executor | None


def _worker_start(memory_limit: int = 0) -> None:
    # gc.freeze: the worker's collections skip the heap inherited from the caller (Django
    # and all), neither walking it nor copying its pages.
    gc.freeze()
    # Ctrl-C reaches the whole foreground process group: the caller stops (and shuts the
    # pool down); a worker's own KeyboardInterrupt only printed a traceback per worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory_limit:
        _limit_address_space(memory_limit)


def _limit_address_space(extra: int) -> None:
    """Cap this process's address space at its current size plus ``extra`` bytes.

    A file can ask a parser for far more memory than it holds (a PDF's 1 MB FlateDecode
    stream inflating to gigabytes: PDFium allocates it whole). Past the cap an allocation
    fails: Python raises MemoryError (the file's error), PDFium aborts (the pool isolates
    the file, "its parser crashed"); without it the kernel's OOM killer picks a process,
    maybe the database's.
    """
    try:
        import resource

        with open("/proc/self/status", encoding="ascii") as status:
            sizes = [line.split()[1] for line in status if line.startswith("VmSize:")]
        current = int(sizes[0]) * 1024
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        limit = current + extra
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, IndexError, ValueError):
        pass  # not Linux: no cap, as before


def _stopped(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def files_parse(
    paths: Iterable[Path],
    *,
    jobs: int,
    chunk_size: int,
    stem: bool = False,
    memory_limit: int = 0,
    on_fallback: Callable[[str], None] = print,
) -> Iterator[ParsedFile]:
    """``ParsePool(...).parse(paths)`` with the pool closed when the iteration ends."""
    with ParsePool(
        jobs=jobs, chunk_size=chunk_size, stem=stem, memory_limit=memory_limit,
        on_fallback=on_fallback,
    ) as pool:  # fmt: skip
        yield from pool.parse(paths)
