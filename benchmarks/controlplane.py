"""A real Kubernetes control plane on loopback for tests and benchmarks (controller-runtime's envtest idea).

etcd and kube-apiserver (and, on request, kube-controller-manager and kube-scheduler) run as child
processes on free 127.0.0.1 ports, with a CA, serving and client certificates generated here (the
``cryptography`` package), and are stopped by PID. There is no kubelet: tests create Node objects
themselves and patch ``pods/status`` when they need Running/Ready pods.

Binaries, in this order:

- ``$KSO_K8S_BIN_DIR``: a folder of the user's own ``kube-apiserver``, ``kube-scheduler``,
  ``kube-controller-manager`` (and optionally ``etcd``), used as they are;
- else the team's xz-compressed v1.36.2 binaries (``$KSO_K8S_DIST``, else ``$KSO_SHARED/k8s``, else
  ``../shared/k8s`` beside the checkout, else ``/work/shared/k8s``), checked against their ``SHA256SUMS``
  and unpacked once into ``$KSO_K8S_CACHE`` (default ``~/.cache/kso/k8s-v1.36.2``);
- etcd: ``$KSO_ETCD``, else ``etcd`` in ``$KSO_K8S_BIN_DIR``, else ``etcd`` on PATH (Debian ``etcd-server``).

``BinariesMissing`` says what was looked for and how to get it.

Usage::

    with ControlPlane() as cp:               # etcd + kube-apiserver
        core = kubernetes.client.CoreV1Api(cp.api_client())
        cp.start_controller_manager()        # optional: replicaset, disruption, namespace, ...
        sched = cp.start_scheduler(yaml_text)  # a KubeSchedulerConfiguration; stop with sched.stop()

``python -m benchmarks.controlplane`` unpacks and checks the binaries (what .ci/run does), and with
``--up`` starts a control plane and prints its kubeconfig path until interrupted.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import datetime as dt
import hashlib
import ipaddress
import json
import lzma
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kso.core.net import free_port  # benchmarks.e2e imports it from here

K8S_VERSION = "v1.36.2"
K8S_BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
SERVICE_CIDR = "10.0.0.0/24"
# Without a node-lifecycle controller nothing removes the not-ready taint TaintNodesByCondition adds to
# every Node a test creates; ServiceAccount admission would refuse pods until a controller makes the
# namespace's `default` ServiceAccount. The control plane is shared by a whole test session and a
# controller-manager may join later, so both are off from the start (envtest does the same).
DISABLED_ADMISSION = "ServiceAccount,TaintNodesByCondition"
CONTROLLERS = ("replicaset,deployment,job,disruption,serviceaccount,serviceaccount-token,"
               "garbagecollector,namespace")

HOW_TO_GET = (
    f"kube-apiserver/kube-scheduler/kube-controller-manager {K8S_VERSION} are needed: set KSO_K8S_BIN_DIR to a "
    "folder holding them (e.g. from https://dl.k8s.io/release/" + K8S_VERSION + "/bin/linux/amd64/), or "
    "KSO_K8S_DIST to a folder with the xz files and SHA256SUMS; etcd comes from PATH "
    "(apt-get install etcd-server) or KSO_ETCD"
)


class BinariesMissing(RuntimeError):
    """The control-plane binaries are not available; the message says what was tried and how to get them."""


class StartError(RuntimeError):
    """A component did not become ready; the message carries the tail of its log."""


# ------------------------------------------------------------------------------------------ binaries


def _shared_k8s() -> Path:
    if os.environ.get("KSO_K8S_DIST"):
        return Path(os.environ["KSO_K8S_DIST"])
    if os.environ.get("KSO_SHARED"):
        return Path(os.environ["KSO_SHARED"]) / "k8s"
    beside = Path(__file__).resolve().parents[2] / "shared" / "k8s"
    return beside if beside.exists() else Path("/work/shared/k8s")


def cache_dir() -> Path:
    if os.environ.get("KSO_K8S_CACHE"):
        return Path(os.environ["KSO_K8S_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kso" / f"k8s-{K8S_VERSION}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_sums(dist: Path) -> dict[str, str]:
    sums: dict[str, str] = {}
    for line in (dist / "SHA256SUMS").read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            sums[parts[1].lstrip("*")] = parts[0].lower()
    return sums


def unpack_binaries(dist: Path | None = None, cache: Path | None = None) -> Path:
    """Checks each ``NAME.xz`` in ``dist`` against SHA256SUMS and decompresses it into ``cache`` once.

    A ``.sha256`` stamp beside each unpacked binary records which archive it came from, so a changed
    archive is unpacked again; writes go through a temporary file and a rename (safe with parallel runs)."""
    dist = dist or _shared_k8s()
    cache = cache or cache_dir()
    if not (dist / "SHA256SUMS").exists():
        raise BinariesMissing(f"no binaries: KSO_K8S_BIN_DIR is unset and {dist}/SHA256SUMS does not exist. {HOW_TO_GET}")
    sums = _read_sums(dist)
    cache.mkdir(parents=True, exist_ok=True)
    for name in K8S_BINARIES:
        archive = dist / f"{name}.xz"
        want = sums.get(archive.name)
        if want is None or not archive.exists():
            raise BinariesMissing(f"{archive} or its line in SHA256SUMS is missing. {HOW_TO_GET}")
        target, stamp = cache / name, cache / f"{name}.sha256"
        if target.exists() and stamp.exists() and stamp.read_text().strip() == want:
            continue
        got = _sha256(archive)
        if got != want:
            raise BinariesMissing(f"{archive}: sha256 {got} does not match SHA256SUMS ({want}); refusing to run it")
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "wb") as out, lzma.open(archive) as src:
                shutil.copyfileobj(src, out, 1 << 20)
            os.chmod(tmp, 0o755)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        stamp.write_text(want + "\n")
    return cache


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    apiserver: Path
    scheduler: Path
    controller_manager: Path


def find_binaries() -> Binaries:
    """The binaries to run (see the module docstring for the order); raises BinariesMissing."""
    own = os.environ.get("KSO_K8S_BIN_DIR")
    if own:
        folder = Path(own)
        missing = [n for n in K8S_BINARIES if not os.access(folder / n, os.X_OK)]
        if missing:
            raise BinariesMissing(f"KSO_K8S_BIN_DIR={own} lacks executable {', '.join(missing)}. {HOW_TO_GET}")
    else:
        folder = unpack_binaries()
    etcd = os.environ.get("KSO_ETCD") or (str(folder / "etcd") if os.access(folder / "etcd", os.X_OK) else None)
    etcd = etcd or shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None)
    if not etcd:
        raise BinariesMissing(f"etcd not found (KSO_ETCD, KSO_K8S_BIN_DIR/etcd, PATH). {HOW_TO_GET}")
    return Binaries(Path(etcd), folder / "kube-apiserver", folder / "kube-scheduler", folder / "kube-controller-manager")


# --------------------------------------------------------------------------------------------- certs


def _key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _cert(subject_cn: str, key: Any, *, ca: tuple[Any, Any] | None = None, orgs: tuple[str, ...] = (),
          server: bool = False) -> Any:
    """An X.509 certificate for ``key``; self-signed CA when ``ca`` is None, else signed by (ca_cert, ca_key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    name = x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)])
    now = dt.datetime.now(dt.UTC)
    issuer, signer = (name, key) if ca is None else (ca[0].subject, ca[1])
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
         .not_valid_after(now + dt.timedelta(days=7)))
    if ca is None:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        b = b.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        ]), critical=False)
    return b.sign(signer, hashes.SHA256())


@dataclass
class _Certs:
    ca: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: bytes
    admin_key: bytes
    sa_key: Path
    sa_pub: Path


def _write_certs(d: Path) -> _Certs:
    from cryptography.hazmat.primitives import serialization

    ca_key = _key()
    ca = _cert("kso-test-ca", ca_key)
    srv_key, adm_key, sa_key = _key(), _key(), _key()
    srv = _cert("kube-apiserver", srv_key, ca=(ca, ca_key), server=True)
    adm = _cert("kso-test-admin", adm_key, ca=(ca, ca_key), orgs=("system:masters",))
    pem = serialization.Encoding.PEM
    files = {"ca.crt": ca.public_bytes(pem), "apiserver.crt": srv.public_bytes(pem), "apiserver.key": _pem_key(srv_key),
             "sa.key": _pem_key(sa_key),
             "sa.pub": sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)}
    for fname, data in files.items():
        (d / fname).write_bytes(data)
        os.chmod(d / fname, 0o600)
    return _Certs(d / "ca.crt", d / "apiserver.crt", d / "apiserver.key", adm.public_bytes(pem), _pem_key(adm_key),
                  d / "sa.key", d / "sa.pub")


# ----------------------------------------------------------------------------------------- processes


@dataclass
class Component:
    """One child process (its own process group), its log file, and how to stop it."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the process by its PID, SIGKILL after ``timeout``."""
        if self.proc.poll() is not None:
            return
        try:
            os.kill(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        except ProcessLookupError:
            pass

    def __enter__(self) -> Component:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGKILL when the process that started it dies, so a test run
    killed without cleanup (SIGKILL, a CI timeout) leaves no etcd or kube-apiserver behind. SIGKILL, not
    SIGTERM: a kube-apiserver whose etcd is gone never finishes its graceful shutdown."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _spawn(name: str, argv: list[str], workdir: Path, port: int = 0) -> Component:
    log = workdir / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=workdir, start_new_session=True,
                                preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    return Component(name, proc, log, port)


def wait_ready(comp: Component, url: str, timeout: float, context: ssl.SSLContext | None = None) -> None:
    """Polls ``url`` until it answers 200 ``ok``; StartError with the log tail if the process dies or time runs out."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not comp.alive():
            raise StartError(f"{comp.name} exited with {comp.proc.returncode}:\n{comp.log_tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.2)
    comp.stop()
    raise StartError(f"{comp.name} not ready at {url} after {timeout:.0f} s ({last}):\n{comp.log_tail()}")


def insecure_tls_context() -> ssl.SSLContext:
    """TLS that does not verify the peer: for the control plane's own components on 127.0.0.1, whose serving
    certificates are self-signed."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


# -------------------------------------------------------------------------------------- control plane


def file_name(label: str) -> str:
    """``label`` as one file name: anything but letters, digits and ``_.=,;-`` becomes "_" (a benchmark label may
    hold a path, e.g. KSO_BENCH_TREE=/work/...)."""
    return re.sub(r"[^A-Za-z0-9_.=,;-]+", "_", label)


@dataclass
class ControlPlane:
    """etcd + kube-apiserver on loopback; ``start_controller_manager``/``start_scheduler`` add the others.

    ``workdir`` (a fresh temporary folder by default, removed by ``stop`` unless ``keep_workdir``) holds
    etcd's data, the certificates, ``kubeconfig`` (cluster-admin, O=system:masters) and each process's log."""

    workdir: Path | None = None
    keep_workdir: bool = False
    apiserver_args: tuple[str, ...] = ()
    binaries: Binaries | None = None
    url: str = ""
    kubeconfig: Path = field(default_factory=Path)
    etcd_url: str = ""
    components: list[Component] = field(default_factory=list)
    _owns_workdir: bool = False
    _controller_manager: Component | None = None

    # -- lifecycle
    def start(self, timeout: float = 60.0) -> ControlPlane:
        self.binaries = self.binaries or find_binaries()
        if self.workdir is None:
            self.workdir, self._owns_workdir = Path(tempfile.mkdtemp(prefix="kso-controlplane-")), True
        self.workdir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            self._start_etcd(timeout)
            self._start_apiserver(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops every component (newest first) by PID, then removes the workdir if this object made it."""
        for comp in reversed(self.components):
            comp.stop()
        self.components.clear()
        self._controller_manager = None
        if self._owns_workdir and not self.keep_workdir and self.workdir and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)
        atexit.unregister(self.stop)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def _dir(self) -> Path:
        assert self.workdir is not None, "ControlPlane.start() first"
        return self.workdir

    def _start_etcd(self, timeout: float) -> None:
        assert self.binaries is not None
        port, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{port}"
        peer_url = f"http://127.0.0.1:{peer}"
        comp = _spawn("etcd", [
            str(self.binaries.etcd), "--name", "kso", "--data-dir", str(self._dir / "etcd"),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"kso={peer_url}", "--unsafe-no-fsync",
            # etcd before 3.4.31 cannot answer kube-apiserver's on-demand progress requests, so a watch
            # cache of a quiet resource lags the store's revision and a consistent read or a watch from a
            # fresh resourceVersion waits 3 s, then fails "Too large resource version". Periodic progress
            # notifications keep every watch cache current.
            "--experimental-watch-progress-notify-interval=100ms",
        ], self._dir, port)
        self.components.append(comp)
        _wait_ready_etcd(comp, self.etcd_url, timeout)

    def _start_apiserver(self, timeout: float) -> None:
        assert self.binaries is not None
        certs = _write_certs(self._dir)
        port = free_port()
        self.url = f"https://127.0.0.1:{port}"
        self._certs = certs
        comp = _spawn("kube-apiserver", [
            str(self.binaries.apiserver), f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={self._dir / 'apiserver-certs'}",
            f"--tls-cert-file={certs.serving_cert}", f"--tls-private-key-file={certs.serving_key}",
            f"--client-ca-file={certs.ca}",
            f"--service-account-key-file={certs.sa_pub}", f"--service-account-signing-key-file={certs.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=Node,RBAC",
            "--endpoint-reconciler-type=none", f"--disable-admission-plugins={DISABLED_ADMISSION}",
            *self.apiserver_args,
        ], self._dir, port)
        self.components.append(comp)
        self.kubeconfig = self._dir / "kubeconfig"
        self.kubeconfig.write_text(self.kubeconfig_yaml())
        os.chmod(self.kubeconfig, 0o600)
        wait_ready(comp, f"{self.url}/readyz", timeout, self.ssl_context())

    # -- access
    def kubeconfig_yaml(self) -> str:
        """A self-contained cluster-admin kubeconfig (certificates inline)."""
        b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
        return yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "kso-test",
            "clusters": [{"name": "kso-test", "cluster": {
                "server": self.url, "certificate-authority-data": b64(self._certs.ca.read_bytes())}}],
            "users": [{"name": "admin", "user": {"client-certificate-data": b64(self._certs.admin_cert),
                                                 "client-key-data": b64(self._certs.admin_key)}}],
            "contexts": [{"name": "kso-test", "context": {"cluster": "kso-test", "user": "admin"}}],
        })

    def ssl_context(self) -> ssl.SSLContext:
        """Verifies the API server and presents the admin client certificate (for raw HTTPS calls)."""
        ctx = ssl.create_default_context(cafile=str(self._certs.ca))
        cert, key = self._dir / "admin.crt", self._dir / "admin.key"
        if not cert.exists():
            cert.write_bytes(self._certs.admin_cert)
            key.write_bytes(self._certs.admin_key)
            os.chmod(key, 0o600)
        ctx.load_cert_chain(str(cert), str(key))
        return ctx

    def api_client(self) -> Any:
        """A kubernetes.client.ApiClient for cluster-admin (kso's own loader, so tests use kso's path)."""
        from kso.core.kube import load_api_client

        return load_api_client(str(self.kubeconfig))

    def env(self) -> dict[str, str]:
        """Environment for a child process (e.g. `kso extender`) that should find this cluster."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    # -- optional components
    def start_controller_manager(self, controllers: str = CONTROLLERS, timeout: float = 60.0) -> Component:
        """kube-controller-manager (once; later calls return the running one)."""
        if self._controller_manager and self._controller_manager.alive():
            return self._controller_manager
        assert self.binaries is not None
        port, kc = free_port(), str(self.kubeconfig)
        comp = _spawn("kube-controller-manager", [
            str(self.binaries.controller_manager), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--authentication-skip-lookup", f"--controllers={controllers}",
            "--use-service-account-credentials=false", "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={port}", f"--service-account-private-key-file={self._certs.sa_key}",
            f"--root-ca-file={self._certs.ca}", f"--cert-dir={self._dir / 'kcm-certs'}",
        ], self._dir, port)
        self.components.append(comp)
        wait_ready(comp, f"https://127.0.0.1:{port}/healthz", timeout, insecure_tls_context())
        self._controller_manager = comp
        return comp

    def scheduler_config(self, config: str | dict[str, Any], keep_leader_election: bool = False) -> dict[str, Any]:
        """``config`` (a KubeSchedulerConfiguration as YAML text or a dict) made to run here: this cluster's
        kubeconfig and, unless ``keep_leader_election``, no leader election (it would add a lease
        acquisition to every start; tests run one scheduler per profile at a time)."""
        cfg = yaml.safe_load(config) if isinstance(config, str) else json.loads(json.dumps(config))
        if not isinstance(cfg, dict) or cfg.get("kind") != "KubeSchedulerConfiguration":
            raise ValueError("start_scheduler needs a KubeSchedulerConfiguration (YAML text or dict)")
        cfg.setdefault("clientConnection", {})["kubeconfig"] = str(self.kubeconfig)
        if not keep_leader_election:
            cfg["leaderElection"] = {"leaderElect": False}
        return cfg

    def start_scheduler(self, config: str | dict[str, Any], *, name: str = "kube-scheduler", timeout: float = 60.0,
                        extra_args: tuple[str, ...] = (), keep_leader_election: bool = False) -> Component:
        """kube-scheduler with ``config`` (see scheduler_config); ``.stop()`` the returned Component when done
        (or use it as a context manager)."""
        assert self.binaries is not None
        cfg = self.scheduler_config(config, keep_leader_election)
        name = file_name(name)  # it names the config file, the log and the cert directory
        port, kc = free_port(), str(self.kubeconfig)
        path = self._dir / f"{name}-{port}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        comp = _spawn(f"{name}-{port}", [
            str(self.binaries.scheduler), f"--config={path}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--authentication-skip-lookup", "--bind-address=127.0.0.1",
            f"--secure-port={port}", f"--cert-dir={self._dir / f'{name}-{port}-certs'}", *extra_args,
        ], self._dir, port)
        self.components.append(comp)
        wait_ready(comp, f"https://127.0.0.1:{port}/healthz", timeout, insecure_tls_context())
        return comp

    def stop_component(self, comp: Component) -> None:
        comp.stop()
        if comp in self.components:
            self.components.remove(comp)

    # -- etcd
    def etcd_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One call to etcd's v3 JSON gateway (e.g. ``/v3/kv/compaction``)."""
        req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"{}")

    def compact_etcd(self) -> int:
        """Compacts etcd at its current revision (older resourceVersions then answer 410 Gone); returns it."""
        rev = int(self.etcd_call("/v3/maintenance/status", {})["header"]["revision"])
        self.etcd_call("/v3/kv/compaction", {"revision": rev, "physical": True})
        return rev


def _wait_ready_etcd(comp: Component, url: str, timeout: float) -> None:
    wait_ready(comp, f"{url}/health", timeout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.controlplane", description=__doc__.split("\n")[0])
    ap.add_argument("--up", action="store_true", help="start etcd + kube-apiserver and wait (Ctrl-C stops)")
    ap.add_argument("--controller-manager", action="store_true", help="with --up: also kube-controller-manager")
    args = ap.parse_args(argv)
    try:
        b = find_binaries()
    except BinariesMissing as exc:
        print(exc)
        return 2
    for p in (b.etcd, b.apiserver, b.scheduler, b.controller_manager):
        print(p)
    if args.up:
        with ControlPlane() as cp:
            if args.controller_manager:
                cp.start_controller_manager()
            print(f"KUBECONFIG={cp.kubeconfig}", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
