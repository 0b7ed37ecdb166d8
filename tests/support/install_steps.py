"""deploy/README.md's install procedure as a test runs it: its numbered steps (title, commands to run, commands that
check), ``kubectl kustomize`` of deploy/ (the transformers deploy/kustomization.yaml uses, nothing more: any other
key fails here rather than being ignored), and the ``kubectl`` commands of the steps run through the kubernetes
client (no kubectl binary where CI runs). What a kubelet would do with the Deployment's pods (start, stop with
SIGTERM, restart) is the caller's, given as ``pods``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
README = DEPLOY / "README.md"
FIELD_MANAGER = "kubectl"
# the kustomization's keys this renderer implements (kubectl kustomize does the same with them)
KUSTOMIZE_KEYS = {"apiVersion", "kind", "resources", "images", "labels"}
# kubectl verbs that only read: a step's check, done by the test its own way
READ_ONLY = {"get", "describe", "logs", "port-forward", "kustomize", "version", "wait"}


@dataclass
class Command:
    """One kubectl command line, split as a shell would (a heredoc's text is the last word, after "<<"), and its
    comment (what it is for: "only with ...", "when turning ... on")."""

    words: list[str]
    comment: str


@dataclass
class Step:
    number: int
    title: str
    text: str

    def _split(self) -> tuple[str, str]:
        do, _, check = self.text.partition("**Check")
        return do, check

    def commands(self, check: bool = False) -> list[Command]:
        """The kubectl command lines of the step's ``sh`` blocks before its "Check" (or, with ``check``, after it)."""
        return list(kubectl_lines(self._split()[1 if check else 0]))

    def yaml_blocks(self) -> list[Any]:
        return [yaml.safe_load(b) for b in re.findall(r"^```yaml\n(.*?)^```", self.text, re.S | re.M)]


def install_steps(readme: str | None = None) -> list[Step]:
    """The numbered steps ("### N. Title") of the "## Install" section."""
    text = readme if readme is not None else README.read_text()
    section = text[text.index("\n## Install\n"):]
    section = section[:re.search(r"\n## (?!Install)", section[1:]).start() + 1]  # type: ignore[union-attr]
    parts = re.split(r"^### (\d+)\. (.+)$", section, flags=re.M)
    return [Step(int(n), title.strip(), body) for n, title, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True)]


def kubectl_lines(markdown: str) -> Iterator[Command]:
    for block in re.findall(r"^```sh\n(.*?)^```", markdown, re.S | re.M):
        lines = iter(block.splitlines())
        for line in lines:
            heredoc = re.search(r"<<'?(\w+)'?\s*$", line)
            if heredoc:
                body = []
                for more in lines:
                    if more.strip() == heredoc.group(1):
                        break
                    body.append(more)
                words = shlex.split(line[:heredoc.start()], comments=True) + ["<<", "\n".join(body)]
            else:
                words = shlex.split(line, comments=True)
            if words[:1] == ["kubectl"]:
                yield Command(words, line.partition("  # ")[2].strip())


def _containers(obj: Any) -> Iterator[dict[str, Any]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from value
            else:
                yield from _containers(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _containers(value)


def kustomize(folder: Path, edits: dict[str, dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize folder`` renders; ``edits`` ({ConfigMap name: data}) are what a user changed
    in its files (step 3's settings)."""
    k = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(k) - KUSTOMIZE_KEYS
    assert not unknown, f"{folder}/kustomization.yaml uses {unknown}: teach tests/support/install_steps.py them"
    labels: dict[str, str] = {}
    for entry in k.get("labels", []):
        assert not entry.get("includeSelectors") and not entry.get("includeTemplates"), entry
        labels.update(entry["pairs"])
    images = {i["name"]: i for i in k.get("images", [])}
    out = []
    for name in k["resources"]:
        for doc in yaml.safe_load_all((folder / name).read_text()):
            if not doc:
                continue
            doc["metadata"].setdefault("labels", {}).update(labels)
            if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] in (edits or {}):
                doc["data"] = {**doc.get("data", {}), **edits[doc["metadata"]["name"]]}  # type: ignore[index]
            for c in _containers(doc.get("spec")):
                image, _, tag = c["image"].partition(":")
                if image in images:
                    new = images[image]
                    c["image"] = f"{new.get('newName', image)}:{new.get('newTag', tag)}"
            out.append(doc)
    return out


def file_objects(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


class Kubectl:
    """The steps' kubectl commands through the kubernetes client. ``pods(action, deployment)`` plays the kubelet
    and controllers for the Deployment's pods: action "scale:N" or "restart"."""

    def __init__(self, api: Any, pods: Callable[[str, str], None], edits: dict[str, dict[str, str]]) -> None:
        self.dyn = DynamicClient(api)
        self.pods = pods
        self.edits = edits
        self.ran: list[str] = []

    def _resource(self, obj: dict[str, Any]) -> Any:
        return self.dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])

    def objects(self, words: list[str]) -> list[dict[str, Any]]:
        """The objects of ``-k DIR`` / ``-f FILE`` / ``-f - << TEXT``."""
        if "-k" in words:
            return kustomize(ROOT / words[words.index("-k") + 1].rstrip("/"), self.edits)
        path = words[words.index("-f") + 1]
        if path == "-":
            return [d for d in yaml.safe_load_all(words[words.index("<<") + 1]) if d]
        return file_objects(ROOT / path)

    def apply(self, objs: list[dict[str, Any]]) -> None:
        # kubectl applies namespaces first (kustomize's order), then the rest as listed
        for obj in sorted(objs, key=lambda o: o["kind"] != "Namespace"):
            self.dyn.server_side_apply(self._resource(obj), body=obj, name=obj["metadata"]["name"],
                                       namespace=obj["metadata"].get("namespace"), field_manager=FIELD_MANAGER,
                                       force_conflicts=True)

    def delete(self, objs: list[dict[str, Any]], ignore_not_found: bool) -> None:
        for obj in objs:
            try:
                self._resource(obj).delete(name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
            except ApiException as exc:
                if exc.status != 404 or not ignore_not_found:
                    raise

    def run(self, words: list[str]) -> None:
        """One command line of a step (``words`` as kubectl_lines splits it)."""
        self.ran.append(" ".join(w for w in words if "\n" not in w))
        ns = words[words.index("-n") + 1] if "-n" in words else None
        args = [w for i, w in enumerate(words[1:], 1) if w != "-n" and words[i - 1] != "-n"]
        verb = args[0]
        if verb == "apply":
            self.apply(self.objects(args))
        elif verb == "delete" and ("-k" in args or "-f" in args):
            # with -k an object already gone with its namespace is reported by kubectl and the rest still deleted
            self.delete(self.objects(args), ignore_not_found="--ignore-not-found" in args or "-k" in args)
        elif verb == "delete":
            kind, name = args[1], args[2]
            self.dyn.resources.get(api_version="v1", kind=kind.capitalize()).delete(name=name,
                                                                                   namespace=ns or "default")
        elif verb == "scale":
            replicas = next(w.split("=", 1)[1] for w in args if w.startswith("--replicas="))
            self.dyn.resources.get(api_version="apps/v1", kind="Deployment").patch(
                name=args[1].split("/", 1)[1], namespace=ns, body={"spec": {"replicas": int(replicas)}},
                content_type="application/merge-patch+json")
            self.pods(f"scale:{replicas}", args[1])
        elif verb == "rollout" and args[1] == "restart":
            self.pods("restart", args[2])
        elif verb == "rollout" and args[1] == "status" or verb in READ_ONLY:
            pass  # a check: the test makes it its own way
        else:
            raise AssertionError(f"deploy/README.md runs `{' '.join(words)}`: the install test does not follow it "
                                 "(add it to tests/support/install_steps.py)")

    def get_selected(self, words: list[str]) -> list[str]:
        """What ``kubectl [-n NS] get KINDS [-A] -l SELECTOR`` lists (as kind/name), through the client."""
        ns = words[words.index("-n") + 1] if "-n" in words else None
        args = [w for i, w in enumerate(words[1:], 1) if w != "-n" and words[i - 1] != "-n"]
        assert args[0] == "get", words
        selector = args[args.index("-l") + 1]
        found = []
        for plural in args[1].split(","):
            # the preferred version of the kind (``kubectl get`` resolves a plural name the same way)
            resource = [r for r in self.dyn.resources.search(name=plural) if r.preferred][0]
            items = resource.get(namespace=ns if resource.namespaced else None, label_selector=selector).items
            found += [f"{plural}/{i.metadata.name}" for i in items if not i.metadata.deletionTimestamp]
        return found
