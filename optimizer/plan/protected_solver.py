"""The one protected way to solve, used by ``kso plan``, the extender's background re-solve and
``kso reoptimize``: the solve runs in a spawned child process (so it never holds the caller's GIL or
request path, and an OR-Tools abort ends only the child), a dead child is retried with another seed, a
child past its wall-clock limit is stopped, and when no attempt returns a plan the caller gets the
first-fit-decreasing placement held to the exact safe bound (``solve_plan``) or SolverDied (``call``)."""

from __future__ import annotations

import dataclasses
import logging
import math
import multiprocessing
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol

from optimizer.plan.compiled import Compiled, SolveResult, SolverOptions, compile_problem
from optimizer.plan.heuristics import first_fit_decreasing
from optimizer.plan.model import finish, solve
from optimizer.plan.problem import PlacementProblem

log = logging.getLogger("kso.optimizer")

# OR-Tools 9.15 CP-SAT can abort the whole process at random (absl::btree_map::at check failure in an
# LNS sub-solve): https://github.com/google/or-tools/issues/5288
ORTOOLS_ABORT = "google/or-tools#5288"
FFD_STATUS = "FFD_FALLBACK"
# The child's own time limit bounds the search; this covers spawning, imports, compiling and the exact
# repair on top of it before the child is deemed stuck.
TIMEOUT_FACTOR, TIMEOUT_SLACK_S = 2.0, 60.0


class Seeded(Protocol):
    seed: int
    time_limit_s: float


class SolverDied(RuntimeError):
    """No attempt's solver process returned; ``notes`` has one line per attempt."""

    def __init__(self, notes: list[str]) -> None:
        super().__init__(notes[-1] if notes else "the solver process died")
        self.notes = notes


class _ChildTraceback(Exception):
    """The traceback of an exception raised in the solver process (as text)."""


def _child_main(send: Connection, func: Callable[..., Any], options: Any, args: tuple[Any, ...], abort: bool,
                stderr_path: str, log_level: int) -> None:
    # The child's stderr (Python's and OR-Tools' C++ output) goes to a file the parent replays, so an
    # abort's C++ stack does not end up on the terminal.
    fd = os.open(stderr_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 2)
    os.close(fd)
    logging.basicConfig(level=log_level, format="%(levelname)s %(name)s: %(message)s")
    try:
        if abort:  # the caller's test hook: die as the OR-Tools check failure does
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            os.abort()
        send.send(("ok", func(options, *args)))
    except BaseException as exc:  # reported to the parent, which raises it
        try:
            send.send(("error", exc, traceback.format_exc()))
        except Exception:  # the exception does not pickle
            send.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}"), traceback.format_exc()))
    finally:
        send.close()


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _last_line(text: str) -> str:
    """The line of a dead solver's stderr most likely to say why: a failed check, else the last one."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "Check failed" in ln or "check failed" in ln:
            return ln[:200]
    return lines[-1][:200] if lines else ""


class ProtectedSolver:
    """Runs solves in a spawned child, one at a time. ``abort_attempts`` is a test hook: the first N
    children of each call die by os.abort() (as the OR-Tools check failure does), so the crash handling
    is tested for real. ``close`` stops a child in flight (the extender's shutdown)."""

    def __init__(self, retries: int = 1, on_crash: Callable[[str], None] | None = None,
                 timeout_s: float | None = None, abort_attempts: int = 0) -> None:
        self.retries = retries
        self.report = on_crash or log.warning
        self.timeout_s = timeout_s
        self.abort_attempts = abort_attempts
        self._proc: BaseProcess | None = None
        self._closed = False

    def call(self, func: Callable[..., Any], options: Seeded, *args: Any) -> tuple[Any, list[str]]:
        """``func(options, *args)`` in a child: (its return value, notes on dead attempts). A dead child is
        retried with options.seed + 1; a child past the wall-clock limit is stopped and not retried.
        Raises SolverDied when no attempt returned, and whatever ``func`` raised otherwise."""
        timeout = self.timeout_s if self.timeout_s is not None else options.time_limit_s * TIMEOUT_FACTOR + TIMEOUT_SLACK_S
        notes: list[str] = []
        self._closed = False
        for attempt in range(self.retries + 1):
            opts = dataclasses.replace(options, seed=options.seed + attempt)  # type: ignore[type-var]
            got = self._attempt(func, opts, args, attempt < self.abort_attempts, timeout)
            if not isinstance(got, str):
                return got[0], notes
            timed_out = got.startswith("the solver process ran past")
            last = attempt == self.retries or timed_out or self._closed
            cause = "" if timed_out or self._closed else f"; an OR-Tools abort, see {ORTOOLS_ABORT}"
            note = (f"attempt {attempt + 1} (seed {opts.seed}): {got}{cause}; "
                    + ("given up" if last else f"retrying with seed {opts.seed + 1}"))
            notes.append(note)
            self.report(note)
            if last:
                break
        raise SolverDied(notes)

    def solve_plan(self, problem: PlacementProblem, options: SolverOptions, comp: Compiled | None = None) -> SolveResult:
        """``optimizer.plan.model.solve`` protected; when no attempt returns, the FFD placement held to the exact
        bound, with every attempt's note and the fallback said in the result's notes."""
        comp = comp if comp is not None else compile_problem(problem)
        try:
            result, notes = self.call(_solve_compiled, options, problem, comp)
        except SolverDied as exc:
            return ffd_result(problem, comp, self.fallback_notes(exc))
        result.notes[:0] = notes
        return result

    def fallback_notes(self, died: SolverDied) -> list[str]:
        """When no attempt returned: the attempts' notes and the fallback to first-fit-decreasing, said (reported)."""
        fallback = "no solver process returned a plan; the plan is first-fit-decreasing's (no CP-SAT)"
        self.report(fallback)
        return [*died.notes, fallback]

    def close(self) -> None:
        """Stop the child in flight, if any; later calls still work."""
        self._closed = True
        proc = self._proc
        if proc is not None and proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)

    def _attempt(self, func: Callable[..., Any], options: Any, args: tuple[Any, ...], abort: bool,
                 timeout_s: float) -> tuple[Any] | str:
        """One call in a spawned process: (its result,), or (the process died or was stopped) why."""
        ctx = _context()
        fd, stderr_path = tempfile.mkstemp(prefix="kso-solver-", suffix=".log")
        os.close(fd)
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child_main, name="kso-solver", daemon=True,
                           args=(send, func, options, args, abort, stderr_path, logging.getLogger().getEffectiveLevel()))
        msg: tuple[Any, ...] | None = None
        stopped = False
        try:
            proc.start()
            self._proc = proc
            send.close()
            deadline = time.monotonic() + timeout_s
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    stopped = True
                    break
                if recv.poll(min(remaining, 1.0)):
                    try:
                        msg = recv.recv()
                    except EOFError:  # the child ended without a word: it died
                        pass
                    break
            proc.join(timeout=5 if msg is not None else 0.5)
        finally:
            recv.close()
            if proc.is_alive():  # stopped, or e.g. KeyboardInterrupt while waiting
                proc.terminate()
                proc.join()
            self._proc = None
        output = Path(stderr_path).read_text(errors="replace")
        if msg is None:
            if stopped:
                why = f"the solver process ran past its wall-clock limit of {timeout_s:.0f} s and was stopped"
            else:
                why = f"the solver process died ({_death(proc.exitcode)}"
                last = _last_line(output)
                if output.strip():
                    last = f"{last!r}; its output is in {stderr_path}" if last else f"its output is in {stderr_path}"
                why += f"{'; ' + last if last else ''})"
            if not output.strip():
                os.unlink(stderr_path)
            return why
        os.unlink(stderr_path)
        if output:
            sys.stderr.write(output)
        if msg[0] == "error":
            raise msg[1] from _ChildTraceback(msg[2])
        return (msg[1],)


def _context() -> multiprocessing.context.BaseContext:
    """Children come from a fork server (not a fork of the caller, which may have threads, e.g. the
    extender's): a clean process started once with the solver modules imported, so each solve starts in
    milliseconds instead of re-importing OR-Tools, numpy and scipy (seconds on a busy 2-core machine)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["optimizer.plan.model", "optimizer.reoptimize.migration"])
    return ctx


def _solve_compiled(options: SolverOptions, problem: PlacementProblem, comp: Compiled) -> SolveResult:
    return solve(problem, options, comp)


def ffd_result(problem: PlacementProblem, comp: Compiled, notes: list[str] | None = None) -> SolveResult:
    """The first-fit-decreasing placement as a solve result (no solver), held to the exact (Beta) safe
    bound like every plan: the fallback when no solver process returns."""
    t0 = time.perf_counter()
    x = first_fit_decreasing(comp).x
    result = SolveResult(x, comp.counts - x.sum(axis=1), FFD_STATUS, math.nan, math.nan, math.nan, 0.0, None, None,
                         0, 0, 0, comp.budget * 0.0, comp.budget * 0.0, list(notes or []))
    return finish(comp, problem, result, "binpack", None, t0)
