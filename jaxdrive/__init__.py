"""jaxdrive: rule-grounded driving-trajectory evaluation (EPDMS kernels) and VLM post-training in JAX/Flax.

``jaxdrive.score`` (``jaxdrive.scorer.score``) is the jittable EPDMS scorer of a padded batch; it is imported on
first use, so ``import jaxdrive`` stays light (no JAX import).
"""

__version__ = "0.1.0"

_LAZY = {"score": ("jaxdrive.scorer", "score")}
__all__ = ["score"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'jaxdrive' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
