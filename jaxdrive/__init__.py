"""jaxdrive: rule-grounded driving-trajectory evaluation (EPDMS kernels) and VLM post-training in JAX/Flax."""

__version__ = "0.1.0"
