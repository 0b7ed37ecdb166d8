"""deploy/README.md's install procedure ("## Install", steps 1-7) run top to bottom on the real control plane
(kube-apiserver, kube-controller-manager with the namespace, garbage and quota controllers, kube-scheduler v1.36.2,
etcd), with the capacity signal and node marks on, ending in an uninstall that must leave nothing kso made.

The steps' titles are this test's ``STEPS``, in order; their ``kubectl`` lines are read from the README and run
through the kubernetes client (tests/support/install_steps.py: apply, delete, scale, rollout restart, the heredoc
test pod; any other command that writes fails the test until it is taught here); the checks each step shows are
made here the same way, and step 7's ``kubectl get ... -l`` checks are run as written. There is no kubelet: the
Deployment's pod is played by ``OnePod`` (kso as a local process with the applied ``kso-settings``, the Deployment's
arguments and the ``kso-scheduler`` ServiceAccount's token, a capacity round every 2 s instead of 10 to keep the
test short; kube-scheduler with the applied ``kso-scheduler-config`` pointed at it), stopped with SIGTERM as a
kubelet would. Steps 1 and 2 need Docker and a
registry: only what they tell the user to write is checked (the names exist). The cluster is made so kso has
something to clean up: node ``in-keep`` is 55% used by its statistics and holds pod ``p`` (1.5 cores) that kso
would refuse on the two hot nodes (~97%), so kso marks it; pod ``web`` (1.9 cores) fits by requests but kso refuses
it on every node, so kso keeps a placeholder for it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from benchmarks.controlplane import Component
from benchmarks.e2e import ExtenderProcess, create_nodes, node_manifest, pod_manifest
from benchmarks.prometheus_text import metric_sum, parse_metrics
from extender.config import load_config
from kso.core.capacity import HOLDER, LEASE_PREFIX, MARKED_BY, SCALE_DOWN_DISABLED
from kso.core.net import free_port
from tests.support.capacity_plane import COOL, HOT, NS, placeholders, service_account_kubeconfig, signal_for
from tests.support.fixtures import started_control_plane, until
from tests.support.install_steps import DEPLOY, ROOT, Command, Kubectl, file_objects, install_steps, kustomize

STEPS = ["Build and push the image", "Point the manifests at your image and Prometheus",
         "Choose the capacity signal and node marks", "Apply", "Verify",
         "Turn the capacity signal or node marks on or off later", "Uninstall"]
IDENTITY = "kso-scheduler-5d8c7b9f4-x2k4q"  # the pod's name, kso's identity in a pod (its host name)
WARM = {**COOL, "mean-free-cpu": "1800", "forcasted-free-cpu": "1800"}
WAIT_S = 60.0
NODE_MARKS = DEPLOY / "optional" / "capacity-node-marks.yaml"


@pytest.fixture(scope="module")
def plane() -> Iterator[Any]:
    """A control plane of this module's own: deploy/ is cluster-wide (PriorityClass, admission policy, ClusterRoles,
    the kso-system namespace other tests dry-run into), and the uninstall needs the namespace controller."""
    from benchmarks.controlplane import CONTROLLERS

    with started_control_plane() as cp:
        cp.start_controller_manager(f"{CONTROLLERS},resourcequota")
        yield cp


class OnePod:
    """The kubelet's part for Deployment kso-system/kso-scheduler, one replica: its two containers as local
    processes, started by scale 1 / rollout restart from what the API server holds, stopped with SIGTERM."""

    def __init__(self, cp: Any, tmp: Path) -> None:
        self.cp, self.tmp = cp, tmp
        self.kso: ExtenderProcess | None = None
        self.scheduler: Any = None
        self.exit_codes: list[int | None] = []
        self.stop_s: list[float] = []  # SIGTERM to exit, each stop
        self.starts = 0

    def __call__(self, action: str, deployment: str) -> None:
        assert deployment == "deployment/kso-scheduler", deployment
        self.stop()
        if action != "scale:0":
            self.start()

    def start(self) -> None:
        api = self.cp.api_client()
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        settings = core.read_namespaced_config_map("kso-settings", "kso-system").data
        [container] = [c for c in apps.read_namespaced_deployment("kso-scheduler", "kso-system").spec.template.spec
                       .containers if c.name == "kso"]
        args = list(container.args)
        assert args[-2] == "--admin-port", args
        scheduler_port = free_port()
        args[args.index("--port") + 1] = str(scheduler_port)
        args[args.index("--admin-host") + 1] = "127.0.0.1"  # not every interface of a shared machine
        self.starts += 1
        kubeconfig = service_account_kubeconfig(self.cp, self.tmp / f"sa-{self.starts}.kubeconfig")
        env = {**os.environ, **settings, "PYTHONUNBUFFERED": "1", "KUBECONFIG": str(kubeconfig),
               "KSO_PLAN_FILE": str(self.tmp / "plan.json"), "KSO_CAPACITY_IDENTITY": IDENTITY,
               # the one setting not as deployed: a capacity round every 2 s, not 10 (the test's length, in CI)
               "KSO_CAPACITY_INTERVAL_S": "2",
               "PYTHONPATH": os.pathsep.join([str(ROOT), *([os.environ["PYTHONPATH"]]
                                                          if os.environ.get("PYTHONPATH") else [])])}
        # the image's ENTRYPOINT is kso; ExtenderProcess appends the admin port
        self.kso = ExtenderProcess([os.environ.get("PYTHON", "python3"), "-m", "kso.cli", *args[:-1]], env,
                                   self.tmp / f"kso-{self.starts}.log", port=free_port(), cwd=ROOT).start()
        cfg = yaml.safe_load(core.read_namespaced_config_map("kso-scheduler-config", "kso-system").data["config.yaml"])
        cfg["extenders"][0]["urlPrefix"] = f"http://127.0.0.1:{scheduler_port}"
        self.scheduler = self.cp.start_scheduler(cfg, name="kso-scheduler", keep_leader_election=True)

    def stop(self) -> None:
        if self.scheduler is not None:
            self.cp.stop_component(self.scheduler)
            self.scheduler = None
        if self.kso is not None:
            assert self.kso.proc is not None
            t0 = time.monotonic()
            # SIGTERM, SIGKILL after the kubelet's default grace period (deployment.yaml sets none: 30 s)
            Component(self.kso.log.stem, self.kso.proc, self.kso.log).stop(timeout=30)
            self.stop_s.append(time.monotonic() - t0)
            self.exit_codes.append(self.kso.proc.returncode)
            self.kso = None


def run(kubectl: Kubectl, commands: list[Command], skip_for: str = "") -> None:
    for command in commands:
        if not (skip_for and skip_for in command.comment):
            kubectl.run(command.words)


def marked(core: client.CoreV1Api) -> list[str]:
    """The nodes carrying kso's mark (what step 6's and step 7's jsonpath lists)."""
    return [n.metadata.name for n in core.list_node().items if MARKED_BY in (n.metadata.annotations or {})]


def capacity_leases(api: Any) -> list[str]:
    return [lease.metadata.name for lease in client.CoordinationV1Api(api).list_lease_for_all_namespaces().items
            if lease.metadata.name.startswith(LEASE_PREFIX)]


def test_the_readme_install_steps_are_the_tests_steps() -> None:
    steps = install_steps()
    assert [s.title for s in steps] == STEPS and [s.number for s in steps] == list(range(1, len(STEPS) + 1))
    assert not steps[0].commands() and not steps[1].commands(), "steps 1-2 only build and edit files"


def test_the_files_steps_1_to_3_edit_exist_and_their_settings_are_kso_settings() -> None:
    steps = install_steps()
    assert "deploy/Dockerfile" in steps[0].text and (DEPLOY / "Dockerfile").is_file()
    images, settings = steps[1].yaml_blocks()
    shipped = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["images"]
    assert [i["name"] for i in images["images"]] == [i["name"] for i in shipped]
    [switches] = steps[2].yaml_blocks()
    load_config({**settings, **switches})  # exits (status 2) naming a setting kso does not read or a bad value
    # the table's "as shipped" column is what deploy/settings.yaml ships
    data = yaml.safe_load((DEPLOY / "settings.yaml").read_text())["data"]
    assert data.get("KSO_CAPACITY_SIGNAL") == "true" and '**on** (`"true"`)' in steps[2].text
    assert "KSO_CAPACITY_KEEP_NODES" not in data and "**off** (not set)" in steps[2].text
    assert load_config({}).capacity.keep_nodes is False


def test_the_kustomize_of_the_test_renders_what_kubectl_renders() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: nothing to compare tests/support/install_steps.kustomize with")
    out = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=60, check=True)

    def key(o: dict[str, Any]) -> tuple[str, str, str]:
        return o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]

    assert sorted(kustomize(DEPLOY), key=key) == sorted((d for d in yaml.safe_load_all(out.stdout) if d), key=key)


def test_install_verify_toggle_and_uninstall_as_the_readme_says(plane: Any, tmp_path: Path) -> None:
    t0 = time.monotonic()
    api = plane.api_client()
    core = client.CoreV1Api(api)
    steps = dict(zip(STEPS, install_steps(), strict=True))
    # the cluster before kso (see the module's docstring)
    hot = ["in-hot-0", "in-hot-1"]
    create_nodes(api, [node_manifest("in-keep", "4", "16Gi", annotations=WARM),
                       *[node_manifest(n, "4", "16Gi", annotations=HOT) for n in hot]])
    core.create_namespace({"metadata": {"name": "shop"}})
    p = pod_manifest("p", cpu="1500m", memory="512Mi")
    p["spec"]["nodeName"] = "in-keep"
    core.create_namespaced_pod("shop", p)

    # 3: the switches as step 3 writes them into deploy/settings.yaml
    [switches] = steps["Choose the capacity signal and node marks"].yaml_blocks()
    assert switches == {"KSO_CAPACITY_SIGNAL": "true", "KSO_CAPACITY_KEEP_NODES": "true"}
    pod = OnePod(plane, tmp_path)
    kubectl = Kubectl(api, pod, {"kso-settings": switches})
    try:
        # 4: apply; check: every object of the kustomization exists; the rollout (the kubelet's part) is ready
        step = steps["Apply"]
        run(kubectl, step.commands())
        for obj in kustomize(DEPLOY) + file_objects(NODE_MARKS):
            kubectl._resource(obj).get(name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
        pod("scale:1", "deployment/kso-scheduler")

        # 5: the test pod is placed by kso-scheduler (the only scheduler running); /readyz; kso_capacity_*; the
        # capacity Lease, and what kso writes for the cluster above: a placeholder for web, a mark on in-keep
        step = steps["Verify"]
        run(kubectl, step.commands())
        until(lambda: core.read_namespaced_pod("kso-test", "default").spec.node_name, WAIT_S, "kso-test placed")
        assert pod.kso is not None and pod.kso.get("/readyz")
        core.create_namespaced_pod("shop", pod_manifest("web", cpu="1900m", memory="512Mi"))
        until(lambda: signal_for(core, "shop/web"), WAIT_S, "an Unschedulable placeholder for shop/web")
        until(lambda: marked(core) == ["in-keep"], WAIT_S, "in-keep marked by kso")
        scrape = parse_metrics(pod.kso.get("/metrics"))
        assert metric_sum(scrape, "kso_capacity_placeholders") == 1 == metric_sum(scrape, "kso_capacity_refused_pods")
        assert metric_sum(scrape, "kso_capacity_kept_nodes") == 1 and metric_sum(scrape, "kso_capacity_hot_nodes") >= 2
        assert capacity_leases(api) == [f"{LEASE_PREFIX}{IDENTITY}"]
        assert core.read_node("in-keep").metadata.annotations[SCALE_DOWN_DISABLED] == "true"
        run(kubectl, step.commands(check=True))  # the clean-up in its check: kso-test deleted
        verified = time.monotonic() - t0

        # 6: node marks off (settings edited, applied, restarted, their RBAC deleted after the rollout): the old kso
        # took its mark off on SIGTERM, the new one marks nothing and still signals
        step = steps["Turn the capacity signal or node marks on or off later"]
        kubectl.edits["kso-settings"]["KSO_CAPACITY_KEEP_NODES"] = "false"
        run(kubectl, step.commands(), skip_for="when turning node marks on")
        assert pod.exit_codes == [0], "the replaced kso exited cleanly on SIGTERM"
        assert marked(core) == [] and SCALE_DOWN_DISABLED not in (core.read_node("in-keep").metadata.annotations or {})
        until(lambda: signal_for(core, "shop/web"), WAIT_S, "the new kso's placeholder for shop/web")
        assert pod.kso is not None and metric_sum(parse_metrics(pod.kso.get("/metrics")), "kso_capacity_kept_nodes") == 0
        with pytest.raises(ApiException, match="Not Found"):
            client.RbacAuthorizationV1Api(api).read_cluster_role("kso-capacity-node-marks")
        toggled = time.monotonic() - t0

        # 7: uninstall. Scaled to 0 (SIGTERM), kso has deleted its placeholder and Lease while its RBAC was there
        step = steps["Uninstall"]
        commands = step.commands()
        scale, rest = commands[:2], commands[2:]
        run(kubectl, scale)
        assert pod.exit_codes == [0, 0]
        assert placeholders(core) == [] and capacity_leases(api) == [] and marked(core) == []
        run(kubectl, rest)
        for name in ("kso-system", NS):
            until(lambda name=name: _gone(lambda: core.read_namespace(name)), 90, f"namespace {name} deleted")
        for check in step.commands(check=True):
            if "-l" in check.words:
                assert kubectl.get_selected(check.words) == [], " ".join(check.words)
        left = [f"{o['kind']}/{o['metadata']['name']}" for o in kustomize(DEPLOY) + file_objects(NODE_MARKS)
                if not _gone(lambda o=o: kubectl._resource(o).get(name=o["metadata"]["name"],
                                                                  namespace=o["metadata"].get("namespace")))]
        assert left == [], "deploy/'s objects left after the uninstall"
        assert marked(core) == []
        assert [n.metadata.name for n in core.list_node().items
                if SCALE_DOWN_DISABLED in (n.metadata.annotations or {})] == []
        assert [p for p in core.list_pod_for_all_namespaces(label_selector=HOLDER).items] == []
    finally:
        pod.stop()
    print(f"\ninstall: kso placed the test pod, signalled and marked {verified:.1f} s after the start, marks off "
          f"at {toggled:.1f} s, uninstalled with nothing left at {time.monotonic() - t0:.1f} s; SIGTERM to exit "
          f"{', '.join(f'{s:.1f}' for s in pod.stop_s)} s (2-core machine, shared; load {os.getloadavg()[0]:.1f})")


def _gone(read: Any) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False
