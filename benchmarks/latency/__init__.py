"""Latency and throughput of the real extender server over loopback, as kube-scheduler drives it.

    python -m benchmarks.latency [--nodes 100,500,5000] [--modes names,full] [--verbs filter,prioritize]
                                 [--node-sets sample,all] [--requests N] [--max-cell-seconds S]
                                 [--concurrency C] [--agents safe,pigeon,...] [--py-spy DIR]
    python -m benchmarks.latency --duration 600 [--rate 2000] [--soak-nodes 500] [--soak-clients 4]
    python -m benchmarks.latency --compare-tree DIR [--nodes 500,5000] [--modes names] [--rounds 6] ...

Before / after in one run (``--compare-tree DIR``, e.g. a ``git worktree add DIR <commit>``): the same
cluster is served by two servers at once, this checkout's and DIR's (each ``python -m kso.cli extender``
run from its own tree), and every cell is measured on both, alternating in ABBA rounds so that the
machine's noise falls on both alike. Reported: the median over rounds of p50 / p99 / calls/s, per tree.
Before that, both trees answer the same sequence of requests in-process (their ASGI apps, the plan
switched off so that no background solve can change a score) and the status, headers and body of every
reply are compared byte for byte: every cell's bodies, the per-agent routes, /preempt, /debug/explain,
and a set of malformed requests.

What runs where
  * The server is the real thing, in its own process (no shared GIL with the client):
    ``python -m kso.cli extender --snapshot <tmp> --host 127.0.0.1 --port <free>`` with
    ``LOG_LEVEL=WARNING`` and one uvicorn worker; the benchmark waits for ``/readyz``.
  * The snapshot is a generated cluster of N nodes shaped as the API server returns them (labels with
    topology / instance type, 10-40 images with digests and sizes, conditions, managedFields, addresses,
    nodeInfo, kube-safe-scheduler's ``mean-free-*`` / ``std-free-*`` annotations, ``congestion-factor`` on
    some), capacities drawn from the Alibaba openb trace (``openb-nodes.csv``), and up to 10 bound pods per
    node (~8 on average: the trace pods are large) with requests from ``openb-pods-cpu.csv`` (first fit).
    Load statistics in the annotations are a synthetic join (utilisation drawn around the requested
    share): the trace has no usage.
  * Requests carry realistic pending Pods (init container, three containers, requests and limits, env,
    volume mounts, probes, tolerations, node and pod affinity, topology spread), each call with a fresh
    UID, in both modes: ``NodeNames`` (nodeCacheCapable: true) and full ``Nodes.items`` (false; the same
    Node objects as the snapshot, so the node cache is not rewritten).
  * Node sets: ``all`` sends every node; ``sample`` sends kube-scheduler's sample of feasible nodes
    (numFeasibleNodesToFind: all below 100 nodes, else max(100, N * max(5, 50 - N/125) / 100); 5000 -> 500),
    from a rotating start. Prioritize bodies carry the nodes that passed the server's own filter of
    that set (as kube-scheduler does); ``all`` for prioritize is the worst case, every node.
  * The client is a raw-socket HTTP/1.1 keep-alive client, one in-flight call per connection, like
    kube-scheduler's single scheduling loop (``--concurrency`` adds client processes).

Reported per cell: p50 / p99 / max client-side latency, calls/s, the server's own mean from its
``kso_extender_request_duration_seconds`` histogram, calls over kube-scheduler's default 5 s
httpTimeout, errors (non-200, timeouts, a non-empty ``Error``, server error counters), and the
server's RSS before and after. The aims (from the issue) are checked, not asserted: NodeNames at 500
nodes p99 < 1.5 ms and > 1,000 calls/s for filter and prioritize; at 5,000 nodes p99 < 10 ms.

Layout (one module per part): ``cluster`` the generated cluster and pending pods, ``server`` the extender
process under test, ``client`` the raw HTTP client and reply checks, ``measure`` drivers and rows,
``profiles`` py-spy, ``matrix`` the default run, ``compare`` --compare-tree, ``replay`` the in-process
reply replay run in each compared tree, ``soak`` --duration, ``cli`` the command line.
"""
