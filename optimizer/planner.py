"""One call from problem to plan, in this process or in a separate one (so a solve never holds the
extender's GIL or its request path, and an abort inside OR-Tools cannot end the caller)."""

from __future__ import annotations

import dataclasses
import logging
import math
import multiprocessing
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from optimizer.model import Compiled, SolveResult, SolverOptions, compile_problem, solve
from optimizer.plan import PlacementPlan, plan_from_result
from optimizer.problem import PlacementProblem

log = logging.getLogger("kso.optimizer")

# OR-Tools 9.15 CP-SAT can abort the whole process at random (absl::btree_map::at check failure in an
# LNS sub-solve): https://github.com/google/or-tools/issues/5288
ORTOOLS_ABORT = "google/or-tools#5288"
# Test-only: KSO_TEST_SOLVER_ABORT=N makes the first N solver processes of a solve_in_child call die
# (os.abort, as the OR-Tools check failure does), so the crash handling is tested for real.
TEST_ABORT_ENV = "KSO_TEST_SOLVER_ABORT"
FFD_STATUS = "FFD_FALLBACK"


def make_plan(problem: PlacementProblem, options: SolverOptions) -> PlacementPlan:
    comp = compile_problem(problem)
    result = solve(problem, options, comp)
    return plan_from_result(problem, comp, result, options.policy)


class PlanWorker:
    """A one-process pool (spawned, not forked: the extender has threads) that solves plans."""

    def __init__(self) -> None:
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, problem: PlacementProblem, options: SolverOptions) -> Future[PlacementPlan]:
        return self._pool.submit(make_plan, problem, options)

    def close(self) -> None:
        """Stop the worker now. shutdown(wait=False) alone left an idle worker running after the extender
        exited on SIGTERM (its exit sentinel never arrived); a solve in flight is abandoned either way."""
        processes = list(getattr(self._pool, "_processes", {}).values())  # CPython's executor keeps them here
        self._pool.shutdown(wait=False, cancel_futures=True)
        for proc in processes:
            if proc.is_alive():
                proc.terminate()
        for proc in processes:
            proc.join(timeout=5)


class SolverDied(RuntimeError):
    """Every attempt's solver process died; ``notes`` has one line per attempt."""

    def __init__(self, notes: list[str]) -> None:
        super().__init__(notes[-1] if notes else "the solver process died")
        self.notes = notes


class _ChildTraceback(Exception):
    """The traceback of an exception raised in the solver process (as text)."""


def _child_solve(send: Connection, problem: PlacementProblem, options: SolverOptions, comp: Compiled, attempt: int,
                 stderr_path: str, log_level: int) -> None:
    # The child's stderr (Python's and OR-Tools' C++ output) goes to a file the parent replays, so an
    # abort's C++ stack does not end up on the terminal.
    fd = os.open(stderr_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 2)
    os.close(fd)
    logging.basicConfig(level=log_level, format="%(levelname)s %(name)s: %(message)s")
    try:
        if attempt < int(os.environ.get(TEST_ABORT_ENV) or 0):
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            os.abort()
        result = solve(problem, options, comp)
        send.send(("ok", result))
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


def _attempt(problem: PlacementProblem, options: SolverOptions, comp: Compiled, attempt: int) -> SolveResult | str:
    """One solve in a spawned process: its result, or (the process died) a description of the death."""
    ctx = multiprocessing.get_context("spawn")
    fd, stderr_path = tempfile.mkstemp(prefix="kso-solver-", suffix=".log")
    os.close(fd)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_solve, name="kso-solver", daemon=True,
                       args=(send, problem, options, comp, attempt, stderr_path, logging.getLogger().getEffectiveLevel()))
    try:
        proc.start()
        send.close()
        try:
            msg = recv.recv()
        except EOFError:  # the child ended without a word: it died
            msg = None
        proc.join()
    finally:
        recv.close()
        if proc.is_alive():  # e.g. KeyboardInterrupt while waiting
            proc.terminate()
            proc.join()
    output = Path(stderr_path).read_text(errors="replace")
    if msg is None:
        why = _last_line(output)
        if output.strip():
            why = f"{why!r}; its output is in {stderr_path}" if why else f"its output is in {stderr_path}"
        else:
            os.unlink(stderr_path)
        return f"the solver process died ({_death(proc.exitcode)}{'; ' + why if why else ''})"
    os.unlink(stderr_path)
    if output:
        sys.stderr.write(output)
    if msg[0] == "error":
        raise msg[1] from _ChildTraceback(msg[2])
    return msg[1]  # type: ignore[no-any-return]


def solve_in_child(problem: PlacementProblem, options: SolverOptions, comp: Compiled | None = None, retries: int = 1,
                   on_crash: Callable[[str], None] | None = None) -> SolveResult:
    """``solve(problem, options, comp)`` in a spawned process, so an OR-Tools abort (google/or-tools#5288)
    kills only that process. A dead process is retried up to ``retries`` times with another seed (the
    abort is nondeterministic); each death is reported to ``on_crash`` (default: a warning) and noted in
    the result. Raises SolverDied when every attempt died, and whatever the solve raised otherwise."""
    comp = comp if comp is not None else compile_problem(problem)
    report = on_crash or log.warning
    notes: list[str] = []
    for attempt in range(retries + 1):
        opts = dataclasses.replace(options, seed=options.seed + attempt)
        got = _attempt(problem, opts, comp, attempt)
        if isinstance(got, SolveResult):
            got.notes[:0] = notes
            return got
        last = attempt == retries
        note = (f"attempt {attempt + 1} (seed {opts.seed}): {got}; an OR-Tools abort, see {ORTOOLS_ABORT}; "
                + ("given up" if last else f"retrying with seed {opts.seed + 1}"))
        notes.append(note)
        report(note)
    raise SolverDied(notes)


def ffd_result(problem: PlacementProblem, comp: Compiled, notes: list[str] | None = None) -> SolveResult:
    """The first-fit-decreasing placement as a solve result (no solver), held to the exact (Beta) safe
    bound like every plan: the fallback when the solver process keeps dying."""
    from optimizer.heuristics import first_fit_decreasing
    from optimizer.model import _enforce_exact, _over, evaluate

    ffd = first_fit_decreasing(comp)
    x = ffd.x.astype(np.int64)
    risk, headroom, _, _ = evaluate(comp, x, problem.u_star)
    result = SolveResult(x, ffd.unplaced.astype(np.int64), FFD_STATUS, math.nan, math.nan, math.nan, 0.0, None, None,
                         0, 0, 0, risk, headroom, list(notes or []))
    removed = _enforce_exact(comp, result, problem)
    if removed:
        result.notes.append(f"{removed} pods taken out of the plan on nodes the exact (Beta) rule rejects")
    result.violations = int(_over(result, problem.eps).any(axis=0).sum())
    result.nodes_used = int(((result.x.sum(axis=0) > 0) | comp.has_pods).sum())
    return result
