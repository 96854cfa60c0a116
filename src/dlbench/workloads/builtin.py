"""The built-in workloads as the command line and the suites see them: name, help, general
fields and defaults, typed options. Nothing here loads torch, so `dlbench run <workload>
--help` and every check of a command line or suite answer at once; each workload's code (its
module, which loads torch) is imported when its benchmark first runs (`later`).

A workload's options live here, its code in its own module (workloads/<name>.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from dlbench import data
from dlbench.options import MAX_SECONDS, MAX_STEPS, Options, option
from dlbench.units import parse_count, parse_zyx
from dlbench.workloads import GENERAL, Workload, later

# ---------------------------------------------------------------- train, smooth


@dataclass(frozen=True)
class TrainOptions(data.DataOptions):
    optimizer: str | None = option(None, "sgd (momentum 0.9, weight decay 1e-4), adam or adamw (default: adam for "
                                         "3D models, sgd for the rest).", choices=("sgd", "adam", "adamw"))
    lr: float | None = option(None, "Learning rate (default 0.01 for SGD, 0.001 for Adam and AdamW).",
                              low=0, low_open=True)
    patch: str | None = option(None, "Volume training patch ZxYxX, e.g. 40x432x432 (default: the model's input "
                                     "shape).", parse=partial(parse_zyx, what="--patch"))
    augment: str = option("auto", "Where volume patches are elastically deformed and flipped: auto (gpu on a GPU, "
                                  "else cpu), cpu (in the workers), gpu (grid_sample on the device; the workers only "
                                  "read) or none.", choices=data.AUGMENT_MODES)
    extrapolate_iters: int = option(100_000, "3D models: report the days to this many training iterations.", low=1,
                                   high=10**12)


@dataclass(frozen=True)
class SmoothOptions(data.DataOptions):
    sigma: float = option(0.25, "Standard deviation of the Gaussian noise.", low=0)


# ---------------------------------------------------------------- volume


def parse_voxels(text: str) -> float:
    return parse_count(text, "--extrapolate")


# What data/prediction_store.py writes (its DTYPES; a test keeps them equal). Its checks, and
# segmentation's, are imported when a value is given: they load numpy, which a --help need not.
OUTPUT_DTYPES = ("uint8", "float16")
SEED_VOLUME, CPU_VOLUME = "200x3072x3072", "24x128x128"


def _volume_shape(text: str) -> None:
    if text != "auto":
        parse_zyx(text, "--volume-shape")


def _block(text: str) -> None:
    if text != "auto":
        parse_zyx(text, "--block")


@dataclass(frozen=True)
class VolumeOptions(Options):
    input: str | None = option(None, "Volume to predict, PATH[:KEY] (.h5/.hdf5, .zarr, .n5; key default "
                                     "volumes/raw). Default: generate --volume-shape on local disk.")
    output: str | None = option(None, "Prediction, PATH[:KEY] (.zarr or .n5; key default 'prediction'). "
                                      "Default: a temporary output, deleted after the run.", parse=later("dlbench.data.prediction_store", "check_output_name"))
    block: str = option("auto", "Output block ZxYxX (whole output chunks each), or 'auto': on a GPU the fastest of the "
                                "blocking with the fewest computed voxels that fits, the 32x384x384 block and a "
                                "smaller one, and the faster layout and half precision, by a short timed probe; "
                                "without a GPU the fewest computed voxels in small tiles, not timed.", parse=_block)
    halo: str = option("16x64x64", "Context added on each side of a block (reflected at the border).",
                       parse=partial(parse_zyx, what="--halo"))
    resume: bool = option(False, "Complete an interrupted output: skip blocks already written.")
    overwrite: bool = option(False, "Replace an existing output.")
    dtype: str = option("uint8", "Output type: uint8 (probability x 255) or float16.", choices=OUTPUT_DTYPES)
    extrapolate: str = option("8.1T", "Report hours for a volume of this many voxels (8.1T: the electron "
                                      "microscopy volume of a Platynereis worm that the 3D U-Net benchmarks "
                                      "extrapolate to).", parse=parse_voxels)
    volume_shape: str = option("auto", "Size of the generated volume when no --input is given: auto is the padded "
                                       f"CREMI volume (electron microscopy of a fly brain) of the 3D U-Net benchmarks on a GPU ({SEED_VOLUME}, 1.9 gigavoxel) "
                                       f"and {CPU_VOLUME} on a CPU (one tile with the default halo, about 2 CPU-minutes: "
                                       "a minute or two on two idle cores, 5 on two shared with 8 busy processes).",
                         parse=_volume_shape)
    readers: int = option(8, "Reader threads.", low=1, high=1024)
    writers: int = option(4, "Writer threads.", low=1, high=1024)
    queue: int = option(8, "Tiles in flight on each side of the GPU.", low=1, high=1024)
    allow_nonfinite: bool = option(False, "Predict a float input that holds NaN or Inf (counted in the result); "
                                          "without it the run stops at the first tile that holds one.")
    kernels: str = option("auto", "fused: dlbench's Triton kernels where they apply (each convolution's bias and the "
                                  "ReLU after it in one pass; 2x2x2 max pooling without PyTorch's indices; the 3D "
                                  "U-Net's upsampling bias added inside its concatenation), the same output to the "
                                  "bit; pytorch: PyTorch's own; auto: fused on a CUDA GPU where Triton is installed.",
                          choices=("auto", "fused", "pytorch"))


# ---------------------------------------------------------------- converge


@dataclass(frozen=True)
class ConvergeOptions(Options):
    data: str | None = option(None, "Folder with images/ and masks/ (`dlbench data seg`). Default: a generated "
                                    "EM-like set in memory.", parse=later("dlbench.data.segmentation", "pairs"))
    target_dice: float = option(0.89, "Stop a fold when the validation DICE reaches this.", low=0, low_open=True,
                                high=1)
    folds: int = option(5, "k of k-fold cross-validation.", low=2, high=1000)
    fold_limit: int | None = option(None, "Run only the first N folds.", low=1, high=1000)
    eval_every: int = option(100, "Evaluate the validation DICE every E steps.", low=1, high=MAX_STEPS)
    eval_near: float | None = option(None, "Once the validation DICE is within this of --target-dice, evaluate every "
                                           "--eval-near-every steps, so the time to the target is not rounded up to "
                                           "a whole --eval-every.", low=0, low_open=True, high=1)
    eval_near_every: int = option(2, "Steps between evaluations near the target (with --eval-near).", low=1,
                                  high=MAX_STEPS)
    max_steps: int = option(4000, "Step budget per fold.", low=1, high=MAX_STEPS)
    max_seconds: float | None = option(None, "Time budget per fold (checked at each evaluation).", unit="s", low=0,
                                       low_open=True, high=MAX_SECONDS)
    lr: float = option(3e-4, "Adam learning rate.", low=0, low_open=True)
    features: int | None = option(None, "Filters of the U-Net's first level (default 64).", low=1, high=4096)
    augment: bool = option(True, "Random flips and rotations of the training crops.")
    synthetic_n: int = option(30, "Images in the generated set (without --data; the ISBI 2012 set has 30).", low=1,
                              high=100_000)
    synthetic_size: int = option(512, "Their width and height in pixels (without --data).", low=16, high=65536)


# ---------------------------------------------------------------- lm_train, lm_infer


@dataclass(frozen=True)
class LMOptions(Options):
    """Where the language models' token ids come from."""
    data: str | None = option(None, "A token file: nanoGPT's flat uint16 .bin (a tokenized corpus such as its "
                                    "openwebtext/train.bin), memory-mapped; random windows of it are the sequences. "
                                    "Default: ids generated on the device with a Zipf-like frequency (never 0).")
    zipf: float = option(1.0, "Generated ids: the n-th most frequent is drawn in proportion to n^-zipf (0: all "
                              "equally often). Not used with --data.", low=0, high=10)


@dataclass(frozen=True)
class LMTrainOptions(LMOptions):
    context: int | None = option(None, "Tokens per sequence (default: the model's context, 1024 for GPT-2); at "
                                       "most the model's.", unit="tokens", low=2, high=2**20)
    lr: float = option(6e-4, "AdamW's learning rate (betas 0.9 and 0.95, weight decay 0.1, as GPT-2's training).",
                       low=0, low_open=True)


@dataclass(frozen=True)
class LMInferOptions(LMOptions):
    prompt: int = option(512, "Prompt tokens per sequence, run in one forward pass (the prefill), which also "
                              "predicts the first new token.", unit="tokens", low=1, high=2**20)
    new_tokens: int = option(128, "Tokens generated per sequence, greedily: the first by the prefill, each other "
                                  "by one decode step with the KV cache. --prompt plus this is at most the model's "
                                  "context.", unit="tokens", low=2, high=2**20)


LM_GENERAL = ("model", "batch", "precision", "optimize", "device", "warmup", "warmup_seconds", "steps",
              "min_seconds", "seed", "gpus", "profile", "profile_trace")


# ---------------------------------------------------------------- the declarations


def _code(name: str) -> dict:
    """The callables of workloads/<name>.py, imported when first called."""
    module = f"dlbench.workloads.{name}"
    return {"run": later(module, "run"), "describe": later(module, "describe")}


def _preflight(name: str):
    return later(f"dlbench.workloads.{name}", "preflight")


BUILTIN: dict[str, Workload] = {w.name: w for w in (
    Workload(
        "fwdbwd", "Forward and backward of a model in training mode, timed separately (the cnn-benchmarks method): "
                  "forward on a random batch, backward from a random upstream gradient, no loss and no optimizer.",
        **_code("fwdbwd"), general=tuple(g for g in GENERAL if g != "gpus"), trains=True,
        label="forward and backward pass", unit="img/s"),
    Workload(
        "train", "Training steps (forward, loss, backward, optimizer) with per-phase times and img/s; with a 3D "
                 "U-Net on a volume, seconds per iteration, iterations per minute and days to 100k iterations.",
        **_code("train"), options=TrainOptions, preflight=_preflight("train"), batch_plans=True, trains=True,
        planned=later("dlbench.workloads.plans", "train"), label="training"),
    Workload(
        "infer", "Inference throughput and latency per batch (avg, p50/p90/p95/p99) under inference_mode.",
        **_code("infer"), options=data.DataOptions, preflight=_preflight("train"), batch_plans=True,
        label="inference", unit="img/s", passes=1.0),
    Workload(
        "smooth", "Randomized-smoothing inference (BenchmarkJade): each input repeated --batch times with noise, "
                  "one forward each.", **_code("smooth"), options=SmoothOptions, preflight=_preflight("train"),
        batch_plans=True, label="smoothed inference", unit="img/s", passes=1.0),
    Workload(
        "volume", "Blockwise prediction of a whole volume of any size: Mvox/s, time per phase, hours for "
                  "--extrapolate voxels.", **_code("volume"), options=VolumeOptions, preflight=_preflight("volume"),
        general=("model", "precision", "channels_last", "optimize", "device", "gpus", "warmup", "seed", "profile",
                 "profile_trace"),
        auto_precision=True, tuning=later("dlbench.workloads.volume", "tuning_facts"),
        tuned_check=later("dlbench.workloads.volume", "tuned_problem"), host_group=True,
        planned=later("dlbench.workloads.volume", "planned"),
        defaults={"model": "unet3d", "precision": "auto", "batch": 1, "warmup": 2, "warmup_seconds": 0.0, "steps": 1,
                  "min_seconds": 0.0},
        label="volume prediction", unit="Mvox/s", passes=1.0, batch_free=True,
        steps_note="A volume run's step is one block: the blocks cut short at the volume's edge are the fast steps "
                   "on the left."),
    Workload(
        "converge", "Train to a DICE target with k-fold cross-validation: time to train, DICE per fold.",
        **_code("converge"), options=ConvergeOptions, preflight=_preflight("converge"),
        planned=later("dlbench.workloads.converge", "planned"),
        general=("model", "batch", "input_shape", "precision", "channels_last", "optimize", "device", "seed", "gpus",
                 "profile", "profile_trace"),
        defaults={"model": "unet2d", "batch": 8}, trains=True, label="training to a target accuracy", unit="img/s"),
    Workload(
        "lm_train", "Training steps of a decoder-only transformer language model (default gpt2: GPT-2 small, 124 M "
                    "parameters, 1024 tokens per sequence) with AdamW, on generated token ids or a token file: "
                    "tokens/s, per-phase times, FLOP utilisation against the measured ceiling.",
        **_code("lm_train"), options=LMTrainOptions, preflight=_preflight("lm_train"), general=LM_GENERAL,
        defaults={"model": "gpt2", "precision": "bf16"}, batch_plans=True, trains=True,
        label="language-model training", unit="tok/s", tasks=("language",)),
    Workload(
        "lm_infer", "Text generation with a decoder-only transformer language model (default gpt2, GPT-2 small): "
                    "the prompt's prefill in tokens/s, then greedy decoding with a KV cache in tokens/s and the "
                    "latency of each decode step (avg, p50/p90/p95/p99).",
        **_code("lm_infer"), options=LMInferOptions, preflight=_preflight("lm_infer"), general=LM_GENERAL,
        defaults={"model": "gpt2", "precision": "bf16", "batch": 1}, batch_plans=True,
        label="language-model generation", unit="tok/s", passes=1.0, tasks=("language",)),
)}
