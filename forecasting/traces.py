"""Utilisation history from the real cluster traces, as ``dict[node, dict[resource, UtilisationSeries]]``.

Traces (in KSO_TRACE_DIR, else ../shared/data beside the checkout: forecasting.trace_dir; see its README.md):

- ``bitbrains``: GWA-T-12 Bitbrains Rnd, August 2013 (Shen et al., CCGrid 2015); key = VM id, cpu =
  usage MHz / provisioned MHz, memory = usage KB / provisioned KB, capacity = cores x 1000 millicores and
  provisioned bytes. Sampled every ~5 min.
- ``alibaba``: Alibaba cluster-trace-v2018 ``machine_usage`` (first 100k rows); key = machine id, cpu and
  memory from the util percentages; cpu capacity 96 cores, memory capacity unknown (NaN).
- ``embedded``: ``kso/data/history-excerpt.csv.gz``, 20 Bitbrains VMs x 3 days in the Bitbrains format,
  shipped with kso for the offline demo (written by ``write_embedded_excerpt``).
- any other value: a path to a CSV (optionally gzipped) in the Bitbrains or Alibaba column layout.

Trace VMs and machines are not Kubernetes nodes: using their keys as node names is a synthetic mapping.
"""

from __future__ import annotations

import gzip
import io
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from forecasting.trace_dir import missing, require, trace_dir
from forecasting.types import UtilisationSeries

SeriesByNode = dict[str, dict[str, UtilisationSeries]]

DATA_DIR = trace_dir()  # at import; the readers below ask forecasting.trace_dir.trace_dir() each time
TRACE_FILES = {"bitbrains": "bitbrains-rnd-2013-08.csv.gz", "alibaba": "alibaba2018-machine-usage.csv.gz"}
EMBEDDED = "history-excerpt.csv.gz"
ALIBABA_CPU_MILLI = 96_000.0  # every machine of the excerpt has 96 cores (README)

BITBRAINS_COLS = ["vm", "timestamp", "cpu_cores", "cpu_capacity_mhz", "cpu_usage_mhz", "mem_capacity_kb",
                  "mem_usage_kb"]
BITBRAINS_DTYPES = {"vm": str, "timestamp": "int64", "cpu_cores": "float64", "cpu_capacity_mhz": "float64",
                    "cpu_usage_mhz": "float64", "mem_capacity_kb": "float64", "mem_usage_kb": "float64"}
ALIBABA_COLS = ["machine_id", "time_stamp", "cpu_util_percent", "mem_util_percent"]
ALIBABA_DTYPES = {"machine_id": str, "time_stamp": "int64", "cpu_util_percent": "float64",
                  "mem_util_percent": "float64"}
EXCERPT_HEADER = ("# kso embedded history excerpt: 20 VMs x 3 days of the GWA-T-12 Bitbrains Rnd trace, "
                  "2013-08 (TU Delft Grid Workloads Archive; A. Shen et al., CCGrid 2015); columns unchanged.\n")


class TraceError(ValueError):
    """A trace that cannot be read: missing file, unknown layout, no rows in the requested window."""


def _layout(path: Path) -> tuple[str, int]:
    """(layout, number of leading comment lines). Comment lines are skipped by count: pandas' comment=
    option costs a noticeable share of the parse of the 4.3 M-row file."""
    opener = gzip.open if path.suffix == ".gz" else open
    skip, header = 0, ""
    try:
        with opener(path, "rt") as f:  # type: ignore[operator]
            for line in f:
                if not line.startswith("#"):
                    header = line
                    break
                skip += 1
    except OSError as exc:
        raise TraceError(f"trace {path}: {exc}") from None
    cols = [c.strip() for c in header.split(",")]
    if "vm" in cols and "cpu_usage_mhz" in cols:
        return "bitbrains", skip
    if "machine_id" in cols and "cpu_util_percent" in cols:
        return "alibaba", skip
    raise TraceError(f"trace {path}: header {header.strip()!r} is neither the Bitbrains nor the Alibaba layout")


def _read_first_keys(path: Path, key: str, usecols: list[str], dtypes: dict[str, object], n: int | None,
                     nodes: list[str] | None, skip: int = 0) -> pd.DataFrame:
    """Read the rows of the first ``n`` keys (or of the keys in ``nodes``).

    Both traces are grouped by key, so reading stops at the first chunk that shows key n+1: a few VMs
    out of the 4.3 M-row Bitbrains file take a fraction of a second instead of a full parse."""
    chunks: list[pd.DataFrame] = []
    seen: dict[str, None] = {}  # insertion-ordered set: file order decides which n keys are "first"
    wanted = set(nodes) if nodes else None
    # round_trip: correctly rounded floats (pandas 2's default "high" parser is off by an ulp on values like
    # 1121.6331225000001, which changed the committed excerpt between versions). pandas 3 parses them
    # correctly by default and deprecates the option (Pandas4Warning), so it is asked for only before 3.
    opts: dict[str, object] = {"usecols": usecols, "dtype": dtypes, "skiprows": skip}
    if int(pd.__version__.split(".", 1)[0]) < 3:
        opts["float_precision"] = "round_trip"
    if n is None and wanted is None:
        return pd.read_csv(path, **opts)  # type: ignore[call-overload]
    reader = pd.read_csv(path, chunksize=200_000, **opts)  # type: ignore[call-overload]
    for chunk in reader:
        last_key = chunk[key].iloc[-1] if len(chunk) else None
        if wanted is not None:
            chunk = chunk[chunk[key].isin(wanted)]
        seen.update(dict.fromkeys(pd.unique(chunk[key])))
        chunks.append(chunk)
        if n is not None and len(seen) > n:
            break
        if wanted is not None and wanted.issubset(seen) and last_key not in wanted:
            break
    reader.close()
    if not chunks:
        return pd.DataFrame(columns=usecols)
    df = pd.concat(chunks, ignore_index=True)
    if n is not None:
        df = df[df[key].isin(list(seen)[:n])]
    return df


class TraceSource:
    """Series from a trace file. ``n_series`` keys (first by file order) or the named ``nodes``;
    ``start_offset_s`` after the trace's first timestamp, ``window_s`` long (None = to the end)."""

    def __init__(self, trace: str = "embedded", n_series: int | None = 20, window_s: float | None = None,
                 start_offset_s: float = 0.0, nodes: list[str] | None = None) -> None:
        self.trace = trace
        if trace == "embedded":
            self.path = Path(str(resources.files("kso.data").joinpath(EMBEDDED)))
        elif trace in TRACE_FILES:
            self.path = trace_dir() / TRACE_FILES[trace]
        else:
            self.path = Path(trace)
        if not self.path.exists():
            raise TraceError(f"trace {trace}: {missing(self.path) if trace in TRACE_FILES else f'{self.path} does not exist'}")
        self.layout, self._skip = _layout(self.path)
        self.name = f"trace:{trace}"
        self.n_series = n_series
        self.window_s = window_s
        self.start_offset_s = start_offset_s
        self.nodes = nodes
        self._cache: SeriesByNode | None = None
        self._end = math.nan

    def now(self) -> float:
        """The trace's "now": the end of the selected window (forecasts are made from there)."""
        if self._cache is None:
            self.node_series()
        return self._end

    def node_series(self, now: float | None = None) -> SeriesByNode:
        """Series per key; ``now`` is ignored (a trace has its own clock, see ``now()``)."""
        if self._cache is None:
            self._cache = self._load()
        return self._cache

    def _load(self) -> SeriesByNode:
        if self.layout == "bitbrains":
            df = _read_first_keys(self.path, "vm", BITBRAINS_COLS, BITBRAINS_DTYPES, self.n_series, self.nodes,
                                  self._skip)
            key, t_col = "vm", "timestamp"
            with np.errstate(divide="ignore", invalid="ignore"):
                cpu = df.cpu_usage_mhz.to_numpy(float) / df.cpu_capacity_mhz.to_numpy(float)
                mem = df.mem_usage_kb.to_numpy(float) / df.mem_capacity_kb.to_numpy(float)
            cap_cpu = df.cpu_cores.to_numpy(float) * 1000.0
            cap_mem = df.mem_capacity_kb.to_numpy(float) * 1024.0
        else:
            df = _read_first_keys(self.path, "machine_id", ALIBABA_COLS, ALIBABA_DTYPES, self.n_series, self.nodes,
                                  self._skip)
            key, t_col = "machine_id", "time_stamp"
            cpu = df.cpu_util_percent.to_numpy(float) / 100.0
            mem = df.mem_util_percent.to_numpy(float) / 100.0
            cap_cpu = np.full(len(df), ALIBABA_CPU_MILLI)
            cap_mem = np.full(len(df), math.nan)
        if df.empty:
            raise TraceError(f"trace {self.trace}: no rows for the requested series")
        keys = df[key].to_numpy()
        t_all = df[t_col].to_numpy(float)
        cols = {"cpu": cpu, "memory": mem}
        for arr in cols.values():  # zero capacity gives inf/NaN ratios: missing samples, not infinitely busy
            arr[~np.isfinite(arr)] = math.nan
        start = float(t_all.min()) + self.start_offset_s
        end = start + self.window_s if self.window_s is not None else math.inf
        keep = (t_all >= start) & (t_all <= end)
        if not keep.any():
            raise TraceError(f"trace {self.trace}: no samples between offset {self.start_offset_s:.0f}s "
                             f"and {self.window_s}s later")
        self._end = float(t_all[keep].max())
        # Group with numpy (one factorize + one stable sort), not DataFrame.groupby/drop_duplicates:
        # 4x faster on the full Bitbrains file.
        codes, uniques = pd.factorize(keys[keep], sort=False)
        t_k = t_all[keep]
        order = np.lexsort((t_k, codes))
        codes, t_k = codes[order], t_k[order]
        sel = np.flatnonzero(keep)[order]
        bounds = np.flatnonzero(np.diff(codes)) + 1
        out: SeriesByNode = {}
        for idx in np.split(np.arange(len(codes)), bounds):
            name = str(uniques[codes[idx[0]]])
            t = t_k[idx]
            # UtilisationSeries wants strictly increasing t; the jittered traces repeat a few timestamps
            # (keep the last row of each).
            last = np.r_[t[1:] != t[:-1], True]
            rows = sel[idx][last]
            for resource, cap in (("cpu", cap_cpu), ("memory", cap_mem)):
                c = float(cap[rows[-1]])
                out.setdefault(name, {})[resource] = UtilisationSeries(
                    name, resource, t[last], cols[resource][rows], c if math.isfinite(c) and c > 0 else math.nan)
        return out


def write_embedded_excerpt(dest: str | Path | None = None, n_vms: int = 20, days: float = 3.0,
                           source: str | Path | None = None) -> Path:
    """Write ``kso/data/history-excerpt.csv.gz``: the first ``n_vms`` Bitbrains VMs, first ``days`` days,
    columns unchanged, with a comment line naming the source. Deterministic (gzip mtime 0), so
    re-running it does not change the committed file."""
    src = Path(source) if source else require(trace_dir() / TRACE_FILES["bitbrains"])
    dest = Path(dest) if dest else Path(__file__).resolve().parent.parent / "kso" / "data" / EMBEDDED
    df = _read_first_keys(src, "vm", BITBRAINS_COLS, BITBRAINS_DTYPES, n_vms, None)
    df = df[df.timestamp < df.timestamp.min() + days * 86400]
    buf = io.StringIO()
    buf.write(EXCERPT_HEADER)
    df.to_csv(buf, index=False, float_format="%.10g")
    with open(dest, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(buf.getvalue().encode())
    return dest
