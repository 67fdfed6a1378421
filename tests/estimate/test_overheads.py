"""The CUDA context and library memory: by architecture, CUDA version and module loading, with sources."""

import pytest

from memlint.errors import UsageError
from memlint.estimate.overheads import (
    CONTEXT_MEASUREMENTS,
    KNOWN_CUDA_VERSIONS,
    cublas_workspace_bytes,
    cuda_context,
    default_cuda_version,
    module_loading,
    parse_cuda_version,
)
from memlint.estimate.target import resolve_target

MiB = 2**20


def test_every_measurement_names_its_source():
    for row in CONTEXT_MEASUREMENTS:
        assert row.source and row.gpu and row.what and row.loading in ("lazy", "eager")


def test_exact_measurement_is_used_when_it_exists():
    v100 = cuda_context((7, 0), (11, 2), "eager")
    assert v100.nbytes == 1343 * MiB and "perf_train_gpu_one" in v100.source and not v100.note
    a100 = cuda_context((8, 0), (12, 2), "lazy")
    assert a100.nbytes == 426 * MiB and "torchrec" in a100.source and not a100.note


def test_nearest_measurement_is_said_to_be_nearest():
    h100 = cuda_context((9, 0), (12, 8), "lazy")
    assert h100.nbytes == 426 * MiB  # no published sm90 figure: the closest lazy one
    assert "nearest used" in h100.note and "--cuda-context" in h100.note
    eager_ampere = cuda_context((8, 0), (11, 8), "eager")
    assert eager_ampere.nbytes == 1343 * MiB and eager_ampere.note  # the only eager measurement


@pytest.mark.parametrize(("cuda", "env", "expected"), [
    ((11, 2), {}, "eager"),                               # lazy loading needs CUDA 11.7
    ((11, 7), {}, "lazy"),                                # torch sets LAZY when unset
    ((12, 8), {"CUDA_MODULE_LOADING": "EAGER"}, "eager"),
    ((12, 1), {"CUDA_MODULE_LOADING": "DEFAULT"}, "eager"),
    ((12, 4), {"CUDA_MODULE_LOADING": "DEFAULT"}, "lazy"),
    ((12, 4), {"CUDA_MODULE_LOADING": "lazy"}, "lazy"),
])
def test_module_loading(cuda, env, expected):
    assert module_loading(cuda, env) == expected


def test_cuda_version_defaults():
    assert default_cuda_version("12.6") == (12, 6)
    assert default_cuda_version(None) == KNOWN_CUDA_VERSIONS[-1]
    assert parse_cuda_version("13.0") == (13, 0)
    with pytest.raises(ValueError):
        parse_cuda_version("twelve")


@pytest.mark.parametrize(("cc", "nbytes"), [((7, 0), 8519680), ((8, 0), 8519680), ((8, 9), 8519680),
                                            ((9, 0), 32 * MiB), ((10, 0), 32 * MiB), ((12, 0), 32 * MiB)])
def test_cublas_workspace_by_architecture(cc, nbytes):
    assert cublas_workspace_bytes(cc) == nbytes


def test_target_resolution_and_overrides():
    h100 = resolve_target("cuda", "H100-80GB", "12.8", None, None)
    assert h100.compute_capability == (9, 0) and h100.cuda_version == (12, 8) and h100.module_loading == "lazy"
    measured = resolve_target("cuda", "V100-16GB", "11.2", 1343 * MiB, None)
    assert measured.context.nbytes == 1343 * MiB and measured.context.source == "given with --cuda-context"
    assert resolve_target("cpu").context is None and resolve_target("cpu").cublas_workspace == 0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"device": "cuda", "cuda": "twelve"}, "--cuda 'twelve'"),
    ({"device": "cuda", "cuda_context_bytes": -1}, "--cuda-context must be >= 0"),
    ({"device": "cpu", "gpu": "A100-80GB"}, "--device cpu cannot be combined with --gpu"),
    ({"device": "cpu", "cuda": "12.8"}, "--device cpu cannot be combined with --cuda"),
    ({"device": "cpu", "cuda_context_bytes": 0}, "--device cpu cannot be combined with --cuda-context"),
    ({"device": "tpu"}, "--device 'tpu'"),
])
def test_bad_targets_are_one_line_usage_errors(kwargs, message):
    with pytest.raises(UsageError) as info:
        resolve_target(**kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_device_used_is_reserved_plus_the_context(tmp_path):
    from memlint.estimate.api import EstimateOptions, estimate
    from memlint.estimate.workload import load_workload

    from estimate_helpers import target

    workload = load_workload(target("mlp.py") + ":build")
    result = estimate(workload, EstimateOptions(gpu="V100-16GB", cuda="11.2", cuda_context=1343 * MiB))
    assert result.device_used == result.peak_reserved + 1343 * MiB
    assert result.overheads["cuda_context"]["bytes"] == 1343 * MiB
    assert result.overheads["cublas_workspace"]["included_in_reserved"] == 2 * 8519680
