"""Tests of transformer_lib.training.averaging: the mean of state dicts and of checkpoint files, against a hand
computation and the identity of k copies; the clear errors for dicts or files of different models."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_runs import tiny_model

import transformer_lib as tl
from transformer_lib.training.averaging import RunningMean, average_checkpoints, average_state_dicts
from transformer_lib.training.checkpoint import CheckpointError, save_checkpoint


def _model(seed, n_heads=2, d_model=16, dropout=0.1):
    return tiny_model(seed, n_heads=n_heads, d_model=d_model, dropout=dropout)


def test_importable_from_the_package_root():
    assert tl.average_state_dicts is average_state_dicts
    assert tl.average_checkpoints is average_checkpoints


@settings(deadline=None)
@given(k=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_the_average_of_k_copies_is_the_copy(k, seed):
    g = torch.Generator().manual_seed(seed)
    sd = {"w": torch.randn(3, 4, generator=g), "h": torch.randn(5, generator=g).half(),
          "b": torch.randn(2, generator=g).bfloat16(), "n": torch.tensor(7)}
    avg = average_state_dicts([sd] * k)
    assert avg.keys() == sd.keys()
    for name, t in sd.items():
        assert avg[name].dtype == t.dtype and avg[name].shape == t.shape
    # float32 accumulation of k equal values, divided by k: exact for the float32 tensor up to rounding
    torch.testing.assert_close(avg["w"], sd["w"], rtol=1e-6, atol=0)
    assert torch.equal(avg["h"], sd["h"]) and torch.equal(avg["b"], sd["b"])   # cast back: exact
    assert torch.equal(avg["n"], sd["n"])


def test_against_a_hand_computation_and_integer_buffers_from_the_last():
    a = {"w": torch.tensor([1.0, 2.0, -4.0]), "count": torch.tensor([1, 2])}
    b = {"w": torch.tensor([3.0, 2.0, 0.0]), "count": torch.tensor([5, 6])}
    c = {"w": torch.tensor([5.0, 5.0, 1.0]), "count": torch.tensor([9, 9])}
    avg = average_state_dicts([a, b, c])
    assert torch.equal(avg["w"], torch.tensor([3.0, 3.0, -1.0]))
    assert torch.equal(avg["count"], torch.tensor([9, 9]))
    assert avg["count"] is not c["count"]                       # a copy, not the last dict's tensor


def test_half_precision_is_averaged_in_float32():
    # float16 sums would overflow (65504 is float16's largest value); float32 ones do not
    big = torch.tensor([60000.0], dtype=torch.float16)
    avg = average_state_dicts([{"w": big}, {"w": big}, {"w": big}])
    assert avg["w"].dtype == torch.float16 and torch.equal(avg["w"], big)
    ref = torch.stack([torch.randn(100).half() for _ in range(3)])
    avg = average_state_dicts([{"w": r} for r in ref])["w"]
    assert torch.equal(avg, ref.float().mean(0).half())


@pytest.mark.parametrize("bad, match", [
    ([], "at least one"),
    ({"w": torch.zeros(1)}, "sequence"),
    ([{"w": torch.zeros(2)}, {"v": torch.zeros(2)}], r"state_dicts\[1\] holds other names"),
    ([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}], r"state_dicts\[1\]\['w'\] has shape \(3,\)"),
    ([{"w": torch.zeros(2)}, {"w": torch.zeros(2).double()}], "dtype"),
    ([{"w": [1.0]}], "must map names to tensors"),
])
def test_bad_state_dicts_get_a_clear_error(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        average_state_dicts(bad)


def test_average_checkpoints_matches_the_state_dict_average_and_loads_it(tmp_path):
    models = [_model(seed) for seed in range(3)]
    paths = [tmp_path / f"c{i}.pt" for i in range(3)]
    for i, (m, p) in enumerate(zip(models, paths)):
        save_checkpoint(p, m, step=i)
    expected = average_state_dicts([m.state_dict() for m in models])
    got = average_checkpoints(paths)
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in got)
    name = "encoder.layers.0.feed_forward.linear1.weight"
    by_hand = (models[0].state_dict()[name] + models[1].state_dict()[name] + models[2].state_dict()[name]) / 3
    torch.testing.assert_close(got[name], by_hand)
    target = _model(99, dropout=0.3)                 # dropout changes no weight: the same model
    average_checkpoints(paths, target)
    assert all(torch.equal(target.state_dict()[k], expected[k]) for k in expected)
    one = average_checkpoints(paths[:1])
    assert all(torch.equal(one[k], models[0].state_dict()[k]) for k in one)


def test_average_checkpoints_refuses_other_models_before_changing_the_model(tmp_path):
    save_checkpoint(tmp_path / "a.pt", _model(0))
    save_checkpoint(tmp_path / "b.pt", _model(1, n_heads=4))        # same shapes, another model
    save_checkpoint(tmp_path / "c.pt", _model(2, d_model=8))
    with pytest.raises(CheckpointError, match="b.pt: a checkpoint of another model"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    with pytest.raises(CheckpointError, match="c.pt"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "c.pt"])
    four_heads = _model(5, n_heads=4)
    before = {k: v.clone() for k, v in four_heads.state_dict().items()}
    with pytest.raises(CheckpointError, match="n_heads"):
        average_checkpoints([tmp_path / "a.pt"], four_heads)
    assert all(torch.equal(four_heads.state_dict()[k], before[k]) for k in before)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "missing.pt"])
    with pytest.raises(TypeError, match="sequence of checkpoint paths"):
        average_checkpoints(str(tmp_path / "a.pt"))
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([])


def _checkpoints(tmp_path, n):
    """``n`` checkpoints of one model with other weights (and optimizer state, as train writes them)."""
    paths = []
    for i in range(n):
        model = _model(i)
        optimizer = torch.optim.Adam(model.parameters())
        model(torch.tensor([[1, 4, 2]]), torch.tensor([[1, 5]])).sum().backward()
        optimizer.step()
        paths.append(tmp_path / f"c{i}.pt")
        save_checkpoint(paths[-1], model, optimizer, step=i)
    return paths


def test_the_running_sum_equals_the_all_at_once_average_and_the_float64_mean(tmp_path):
    paths = _checkpoints(tmp_path, 7)
    states = [torch.load(p, weights_only=True)["model"] for p in paths]
    got = average_checkpoints(paths)
    # the same float32 additions in the same order as average_state_dicts: equal, not close
    expected = average_state_dicts(states)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    # against the mean in float64: n float32 additions and one division each round to within
    # 2^-24 of their result, so the error is below (n + 1) * 2^-24 * the mean of |x|
    n = len(states)
    for name, value in got.items():
        if value.is_floating_point():
            exact = sum(s[name].double() for s in states) / n
            bound = (n + 1) * 2.0 ** -24 * (sum(s[name].double().abs() for s in states) / n)
            assert bool(((value.double() - exact).abs() <= bound).all()), name


@pytest.mark.parametrize("n", [2, 6])
def test_averaging_holds_one_file_at_a_time(tmp_path, monkeypatch, n):
    """Peak memory does not grow with n: at most one file's weights are alive at once (an average
    that gathers every file first has n alive)."""
    import weakref

    import transformer_lib.training.averaging as averaging
    paths = _checkpoints(tmp_path, n)
    alive, peak = [0], [0]
    real = averaging.load_checkpoint

    def counted(*args, **kwargs):
        state = real(*args, **kwargs)
        alive[0] += 1
        peak[0] = max(peak[0], alive[0])
        weakref.finalize(next(iter(state["model"].values())), lambda: alive.__setitem__(0, alive[0] - 1))
        return state

    monkeypatch.setattr(averaging, "load_checkpoint", counted)
    average_checkpoints(paths)
    assert peak[0] == 1
    assert alive[0] == 0


def test_the_running_sum_refuses_a_file_with_other_tensors(tmp_path):
    save_checkpoint(tmp_path / "a.pt", _model(0))
    state = torch.load(tmp_path / "a.pt", weights_only=True)
    state["model"]["extra.weight"] = torch.zeros(2)
    torch.save(state, tmp_path / "b.pt")
    with pytest.raises(CheckpointError, match=r"b.pt: holds other tensors than .*a.pt: missing \[\], unexpected "
                                              r"\['extra.weight'\]"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    state = torch.load(tmp_path / "a.pt", weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name] = state["model"][name].double()
    torch.save(state, tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match=rf"c.pt: {name} has shape .* and dtype torch.float64"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "c.pt"])


@settings(deadline=None, max_examples=20)
@given(k=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_running_mean_equals_average_state_dicts(k, seed):
    g = torch.Generator().manual_seed(seed)
    dicts = [{"w": torch.randn(3, 4, generator=g), "h": torch.randn(5, generator=g).half(),
              "d": torch.randn(2, generator=g).double(), "n": torch.tensor(i)} for i in range(k)]
    mean = RunningMean()
    for i, sd in enumerate(dicts):
        mean.add(sd, f"dict {i}")
    got, expected = mean.mean(), average_state_dicts(dicts)
    assert all(torch.equal(got[key], expected[key]) and got[key].dtype == expected[key].dtype for key in expected)


def test_running_mean_refuses_another_model_and_keeps_its_sum():
    mean = RunningMean()
    mean.add({"w": torch.ones(2)}, "first")
    with pytest.raises(ValueError, match=r"second: w has shape \(3,\) and dtype torch.float32, in first \(2,\)"):
        mean.add({"w": torch.zeros(3)}, "second")
    with pytest.raises(ValueError, match=r"third: holds other tensors than first: missing \['w'\], unexpected \['v'\]"):
        mean.add({"v": torch.zeros(2)}, "third")
    mean.add({"w": torch.full((2,), 3.0)}, "fourth")
    assert torch.equal(mean.mean()["w"], torch.full((2,), 2.0)) and mean.count == 2
    with pytest.raises(ValueError, match="no state dict was added"):
        RunningMean().mean()
