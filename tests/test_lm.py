"""The language-model workloads (`dlbench run lm_train`, `lm_infer`): the GPT model and its KV cache,
its registry names, the token data (generated and read from a token file), every bad input's line,
and both workloads end to end through the CLI into a real store."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlbench.data import tokens
from dlbench.errors import UserError
from dlbench.models import registry
from dlbench.models.gpt import GPT, Decode, KVCache, Prefill, generate
from dlbench.models.gpt_config import GPTConfig, parse_name
from dlbench.results.store import Store
from dlbench.spec import BenchmarkSpec
from dlbench.workloads import optimize

from conftest import assert_user_error, cli

TINY = "gpt2:layers=2,heads=2,width=32,vocab=97,context=16"
QUICK = ("--device", "cpu", "--warmup", "1", "--warmup-seconds", "0", "--steps", "2", "--min-seconds", "0")
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # two busy cores: processes must not fight over them


def _model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(parse_name(TINY)).eval()


def _spec(workload: str = "lm_train", **values) -> BenchmarkSpec:
    return BenchmarkSpec.from_dict({"workload": workload, "model": TINY, "device": "cpu", **values})


def _token_file(path, ids) -> str:
    np.asarray(ids, dtype="<u2").tofile(path)
    return str(path)


def _bytes_file(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _stored(db):
    """The runs' results, without a system record the run may have measured for its utilisation."""
    with Store(db) as store:
        return [r for r in store.results() if r.workload != "system"]


# ---------------------------------------------------------------- the model


def test_kv_cache_decoding_gives_the_full_forward_pass_logits():
    model = _model()
    prompt = torch.randint(1, 97, (3, 5))
    with torch.no_grad():
        ids = generate(model, prompt, 9)  # the prompt, then 9 tokens: 1 from the prefill, 8 decode steps
        full = model(ids)  # every position at once, causal attention
        cache = KVCache(model.config, 3, 14, "cpu", torch.float32)
        prefill, decode = Prefill(model, cache), Decode(model, cache)
        got = [prefill(prompt)]
        cache.pos.fill_(5)
        for t in range(5, 13):
            logits = decode(ids[:, t:t + 1])
            assert torch.equal(decode(ids[:, t:t + 1]), logits)  # a call again at the same position: the same
            got.append(logits)
            cache.pos.add_(1)
    torch.testing.assert_close(torch.stack(got, 1), full[:, 4:13], rtol=1e-4, atol=1e-5)
    assert torch.equal(ids[:, 5:], full[:, 4:13].argmax(-1))  # greedy: each new token the argmax of the one before


def test_the_default_model_is_gpt2_small_with_its_124m_parameters():
    entry = registry.resolve("gpt2")
    assert entry.title == "GPT-2 small" and entry.task == "language" and entry.input_shape == (1024,)
    model = registry.build_on_meta(entry)  # no memory, no time
    assert sum(p.numel() for p in model.parameters()) == 124_439_808  # GPT-2 small, embeddings tied
    assert model.lm_head.weight is model.wte.weight
    assert model.config == GPTConfig(layers=12, heads=12, width=768, vocab=50257, context=1024)
    assert [parse_name(n).layers for n in ("gpt2-medium", "gpt2-large", "gpt2-xl")] == [24, 36, 48]
    tiny = registry.resolve(TINY)
    assert tiny.title == "GPT-2 small (layers=2,heads=2,width=32,vocab=97,context=16)" and tiny.input_shape == (16,)


@pytest.mark.parametrize("name, needle", [
    ("gpt2:layers=0", "bad model setting 'layers=0'"),
    ("gpt2:depth=3", "bad model setting 'depth=3'"),
    ("gpt2:heads=5,width=32", "width 32 is not a multiple of heads 5"),
    ("gpt2:vocab=1", "vocab and context must be at least 2"),
])
def test_bad_model_settings(name, needle):
    with pytest.raises(UserError, match=needle):
        registry.resolve(name)


def test_a_compiled_decode_step_writes_the_real_cache(monkeypatch):
    """The optimisation levels wrap the prefill and decode modules; their check against eager runs
    the same position again, and the compiled step must write the cache the loop reads."""
    monkeypatch.setenv(optimize.BACKEND_ENV, "aot_eager")  # dynamo and AOTAutograd without inductor's C++ builds
    spec = _spec("lm_infer", optimize="compile", precision="fp32", batch=2, prompt=4, new_tokens=3)
    model = _model()
    prompt = torch.randint(1, 97, (2, 4))
    with torch.no_grad():
        want = generate(model, prompt, 3)
        cache = KVCache(model.config, 2, 7, "cpu", torch.float32)
        prefill, checked = optimize.prepare(spec, Prefill(model, cache), prompt)
        token = prefill(prompt).argmax(-1, keepdim=True)
        cache.pos.fill_(4)
        decode, _ = optimize.prepare(spec, Decode(model, cache), token)
        got = [token]
        for _ in range(2):
            got.append(decode(got[-1]).argmax(-1, keepdim=True))
            cache.pos.add_(1)
    assert checked["optimize"] == "compile" and checked["check_error"]["outputs"] < 1e-4
    assert torch.equal(torch.cat([prompt, *got], 1), want)
    assert cache.layers[0].keys[:, :, :6].abs().sum(-1).all()  # every position written, in the real buffer


# ---------------------------------------------------------------- token data


def test_generated_ids_are_never_zero_and_zipf_like():
    ids = tokens.zipf_stream(200_000, 97, 1.0, torch.device("cpu"), seed=3)
    assert ids.dtype == torch.int64 and int(ids.min()) >= 1 and int(ids.max()) <= 96
    counts = torch.bincount(ids, minlength=97)[1:].sort(descending=True).values.double()
    assert counts[0] / counts[9] == pytest.approx(10, rel=0.15)  # the 1st drawn about 10x as often as the 10th
    assert not torch.equal(ids[:1000], torch.sort(ids[:1000]).values)  # the frequent ids are not the small ones
    flat = tokens.zipf_stream(200_000, 97, 0.0, torch.device("cpu"), seed=3)
    counts = torch.bincount(flat, minlength=97)[1:].double()
    assert counts.min() / counts.max() > 0.8  # --zipf 0: uniform


def test_windows_of_a_token_file_are_its_own_ids(tmp_path):
    ids = np.arange(1, 1001) % 97  # ids 0..96 in order: a window is a run of consecutive ids
    path = _token_file(tmp_path / "train.bin", ids)
    source = tokens.source(path, 97, 17, 4, torch.device("cpu"), seed=0)
    assert source.kind == "file" and len(source) == 1000
    for _ in range(3):
        windows = source.take(4, 17)
        assert windows.shape == (4, 17) and windows.dtype == torch.int64
        for row in windows.numpy():
            first = int(np.flatnonzero(ids == row[0])[0])
            assert (np.diff(row) % 97 == 1).all() and ids[first] == row[0]
    generated = tokens.source(None, 97, 17, 4, torch.device("cpu"), seed=0)
    assert generated.kind == "generated" and generated.take(4, 17).min() >= 1


def test_an_id_beyond_the_vocabulary_found_while_reading(tmp_path):
    """A file the run's preflight did not scan (the run opens it without reading it whole) still never
    feeds an id the model does not have."""
    path = _token_file(tmp_path / "train.bin", [5] * 40 + [300] * 40)
    source = tokens.source(path, 97, 60, 2, torch.device("cpu"), seed=0)
    with pytest.raises(UserError, match="holds token id 300 at position 40, beyond the model's vocabulary of 97"):
        source.take(2, 60)


BAD = [
    ("missing", lambda d: str(d / "nothing.bin"), "nothing.bin: no such file"),
    ("folder", lambda d: str(d), "is not a file: give a token file"),
    ("empty", lambda d: _token_file(d / "e.bin", []), "e.bin is empty"),
    ("odd", lambda d: _bytes_file(d / "o.bin", b"\x01\x00" * 20 + b"\x01"),
     "o.bin is 41 bytes, an odd number"),
    ("short", lambda d: _token_file(d / "s.bin", [1] * 10), "s.bin holds 10 tokens; one sequence here needs 17"),
    ("vocab", lambda d: _token_file(d / "v.bin", [1] * 7 + [200] + [1] * 50),
     "v.bin holds token id 200 at position 7, beyond the model's vocabulary of 97 (ids 0 to 96)"),
]


@pytest.mark.parametrize("name, make, needle", BAD, ids=[b[0] for b in BAD])
def test_a_bad_token_file_is_one_line(tmp_path, name, make, needle):
    spec = _spec(data=make(tmp_path))
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)")) as caught:
        spec.declared.preflight(spec)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("values, needle", [
    ({"context": 32}, "--context 32 is longer than gpt2:layers=2,heads=2,width=32,vocab=97,context=16's 16 positions"),
    ({"workload": "lm_infer", "prompt": 10, "new_tokens": 10}, "--prompt 10 and --new-tokens 10 need 20 positions"),
])
def test_sizes_that_do_not_fit_the_model(values, needle):
    spec = _spec(**values)
    with pytest.raises(UserError, match=needle):
        spec.declared.preflight(spec)


def test_bad_input_through_the_cli_is_one_line_and_exit_2(tmp_path, db):
    assert_user_error(cli("run", "lm_train", "--model", "gpt2:layers=0", *QUICK, "--db", db), "bad model setting")
    assert_user_error(cli("run", "lm_train", "--model", TINY, "--data", tmp_path / "none.bin", *QUICK, "--db", db),
                      "none.bin: no such file")


# ---------------------------------------------------------------- the workloads end to end


def test_lm_train_on_a_token_file_is_stored_in_tokens_per_second(tmp_path, db):
    path = _token_file(tmp_path / "train.bin", np.random.default_rng(0).integers(0, 97, 5000))
    proc = cli("run", "lm_train", "--model", TINY, "--batch", "3", "--data", path, "--precision", "fp32", *QUICK,
               "--db", db, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    assert " tok/s; data " in proc.stdout and "optimizer" in proc.stdout
    (result,) = _stored(db)
    m = result.measured
    assert result.status == "ok" and result.title.startswith("GPT-2 small") and result.setup.precision == "fp32"
    assert m.throughput.unit == "tok/s" and m.throughput.value > 0
    steps = result.samples["step"]
    assert len(steps) == 2 and m.throughput.value == pytest.approx(3 * 16 * 2 / sum(steps))  # batch x context a step
    assert m.data.input_shape == [3, 16] and m.data.source == "file" and m.data.path == path
    assert m.data.images is None and m.training.optimizer == "adamw" and m.training.task == "language"
    assert set(m.phases) == {"data", "h2d", "forward", "backward", "optimizer"}
    # the FLOPs the run counted, about 6 x parameters x tokens (forward and backward) plus the attention's
    assert m.utilisation.parameters == sum(p.numel() for p in _model().parameters())
    assert 0.8 < m.utilisation.flops_per_step / (6 * m.utilisation.parameters * 3 * 16) < 1.5


def test_lm_infer_at_batch_1_and_2_stores_prefill_decode_and_latency(db):
    proc = cli("run", "lm_infer", "--model", TINY, "--batch", "1,2", "--prompt", "8", "--new-tokens", "5", *QUICK,
               "--db", db, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("ok lm_infer") == 2 and "decode" in proc.stdout and "p99" in proc.stdout
    results = sorted(_stored(db), key=lambda r: r.setup.batch)
    assert [r.setup.batch for r in results] == [1, 2]
    for r in results:
        m = r.measured
        assert r.status == "ok" and r.setup.precision == "bf16"  # the workload's default
        assert m.throughput.unit == "tok/s" and m.throughput.value == m.extra["decode_tokens_per_s"]
        assert len(r.samples["decode"]) == 2 * 4 and len(r.samples["prefill"]) == 2  # 2 requests, 4 decode steps each
        batch = r.setup.batch
        assert m.throughput.value == pytest.approx(batch * 8 / sum(r.samples["decode"]))
        assert m.extra["prefill_tokens_per_s"] == pytest.approx(batch * 8 * 2 / sum(r.samples["prefill"]))
        lat = m.latency
        assert 0 < lat.p50_ms <= lat.p90_ms <= lat.p95_ms <= lat.p99_ms
        assert lat.avg_ms == pytest.approx(sum(r.samples["decode"]) / 8 * 1e3)
        assert m.stats["decode"].n == 8 and m.stats["prefill"].p99 is not None
        assert m.data.input_shape == [batch, 8] and m.data.source == "generated" and m.utilisation.flops_per_step > 0


@pytest.mark.slow
def test_lm_train_on_two_processes(db):
    proc = cli("run", "lm_train", "--model", TINY, "--batch", "2", "--gpus", "2", *QUICK, "--db", db, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    assert "on 2 processes" in proc.stdout
    (r,) = _stored(db)
    m = r.measured
    assert m.run.processes == 2 and [line.rank for line in m.data.per_rank] == [0, 1]
    assert m.throughput.value == pytest.approx(2 * 2 * 16 * m.window.steps / m.window.window_s)
    assert m.training.all_reduce.backend == "gloo"


@pytest.mark.slow
def test_lm_infer_on_two_processes(db):
    proc = cli("run", "lm_infer", "--model", TINY, "--batch", "2", "--gpus", "2", "--prompt", "6", "--new-tokens", "4",
               *QUICK, "--db", db, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    assert "on 2 processes" in proc.stdout
    (r,) = _stored(db)
    m = r.measured
    assert m.run.processes == 2 and len(m.data.per_rank) == 2
    assert len(r.samples["decode"]) == 2 * 2 * 3  # both ranks' 2 requests of 3 decode steps
    slowest = max(line.steps * line.phases["decode"].median_ms for line in m.data.per_rank)
    assert m.throughput.value > 0 and m.stats["decode"].n == 12 and slowest > 0


def test_a_language_model_runs_only_under_the_language_workloads():
    with pytest.raises(UserError, match=r"^lm_train runs language models \(gpt2, gpt2-medium, .*\); 'resnet18' is a "
                                        r"classify model$"):
        _spec(model="resnet18")
    with pytest.raises(UserError, match=r"^model 'gpt2' is a language model, which train cannot run: use "
                                        r"`dlbench run lm_train` or `dlbench run lm_infer`$"):
        BenchmarkSpec(workload="train", model="gpt2", device="cpu")
