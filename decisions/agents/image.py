"""Agent ``image``: image locality.

- ``image_score`` reproduces the image-score extender example: the number of the pod's containers
  whose image string occurs (substring) in any name of any image on the node; no cap.
- ``image-locality`` is the size-aware score of the default ImageLocality plugin on 0..10: the sizes
  of the pod's images present on the node, each scaled by the share of nodes that hold it (so one
  node holding a rare image does not attract everything), clamped and normalised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from decisions.agents.base import MAX_PRIORITY, Agent, Call
from kso.core.objects import NodeInfo
from kso.core.resources import MIB
from kso.core.settings import setting

MIN_THRESHOLD = 23 * MIB  # ImageLocality's minThreshold
MAX_CONTAINER_THRESHOLD = 1000 * MIB  # maxContainerThreshold, per container


@dataclass
class ImageParams:
    api_prefix: str = setting("IMAGE_API_PREFIX", "/my_scheduler_extension",
                              help="first part of the image agent's kube-safe-scheduler route (<prefix>/<priorities "
                                   "prefix>/image_score)")
    priorities_prefix: str = setting("IMAGE_PRIORITIES_PREFIX", "my_new_priorities", help="second part of that route")


def _substring_matches(node: NodeInfo, image: str) -> bool:
    cache = node.memo.setdefault("image_substring", {})
    hit = cache.get(image)
    if hit is None:
        joined = node.memo.get("image_joined")
        if joined is None:
            joined = node.memo["image_joined"] = "\n".join(node.raw_image_names)
        hit = cache[image] = bool(image) and image in joined
    return hit


# Default ImageLocality: sum over the pod's images present on the node of
#     int(sizeBytes * nodesWithImage / totalNodes)
# clamped to [23 MiB, 1000 MiB * containers]; score100 = 100 (sum - 23 MiB) // (max - 23 MiB).
# kso reports it on the extender scale: score = score100 * 10 // 100.
def image_locality_score(sizes: np.ndarray, spread: np.ndarray, n_containers: int) -> np.ndarray:
    """sizes: (n, k) bytes of each of the pod's k images on each node (0 = absent);
    spread: (k,) nodesWithImage / totalNodes."""
    total = np.floor(sizes * spread).sum(axis=1) if sizes.size else np.zeros(sizes.shape[0])
    hi = MAX_CONTAINER_THRESHOLD * max(n_containers, 1)
    total = np.clip(total, MIN_THRESHOLD, hi)
    score100 = (100 * (total - MIN_THRESHOLD)) // (hi - MIN_THRESHOLD)
    return (score100 * MAX_PRIORITY // 100).astype(int)


class ImageAgent(Agent):
    name = "image"
    explain_per_node = ("image_bytes_present",)
    Params = ImageParams

    def __init__(self, params: ImageParams) -> None:
        super().__init__(params)
        self.priorities = {"image_score": self.image_score, "image-locality": self.image_locality}

    def image_score(self, call: Call) -> np.ndarray:
        images = call.pod.raw_images
        return np.fromiter(
            (0 if node is None else sum(_substring_matches(node, img) for img in images)
             for node in call.view.nodes),
            dtype=int, count=len(call.view),
        )

    def _sizes(self, call: Call) -> tuple[np.ndarray, np.ndarray]:
        images = list(dict.fromkeys(call.pod.images))  # distinct, normalised
        view = call.view
        sizes = view.image_sizes(images)  # one cached column per image in the node cache, gathered by row
        total = max(view.total_nodes, 1)
        spread = np.array([view.image_node_count.get(img, 0) / total for img in images])
        return sizes, np.minimum(spread, 1.0)

    def image_locality(self, call: Call) -> np.ndarray:
        counts = call.view.image_node_count
        if not any(counts.get(img, 0) for img in call.pod.images):
            # No node holds any of the pod's images: every spread is 0, so every score is 0.
            return np.zeros(len(call.view), dtype=int)
        sizes, spread = self._sizes(call)
        return image_locality_score(sizes, spread, len(call.pod.images))

    def explain(self, call: Call) -> dict[str, Any]:
        sizes, _ = self._sizes(call)
        return {"image_bytes_present": [int(x) for x in sizes.sum(axis=1)]}
