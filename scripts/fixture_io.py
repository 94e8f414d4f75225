"""Helpers shared by the PyTorch reference scripts (`make_*_fixtures.py`): the tensors a fixture
stores (float32 copies, int64 ids, float64 scalars), writing one safetensors file, and the BERT
building blocks the references are written with (exact-erf GELU, LayerNorm at eps 1e-12, a
post-norm BERT layer that attends to its own input or, cross-attention, to another one).

Imported by scripts run as `python3 scripts/make_X_fixtures.py` (scripts/ is then on sys.path);
like them, it needs torch and safetensors, and CI never runs it.
"""

import math
from pathlib import Path

import torch
from safetensors.torch import save_file

LN_EPS = 1e-12  # BERT's layer_norm_eps


def f32(t: torch.Tensor) -> torch.Tensor:
    """A float32 copy for the fixture file, outside the autograd graph."""
    return t.detach().float().contiguous()


def i64(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int64).contiguous()


def f64_scalar(v) -> torch.Tensor:
    """A float64 scalar tensor of a number or of a one-element tensor."""
    return torch.tensor(float(v), dtype=torch.float64)


def i64_scalar(n: int) -> torch.Tensor:
    return torch.tensor(n, dtype=torch.int64)


def entries(group: str, convert, **values) -> dict:
    """`values` converted by `convert`, each under the fixture name `group.NAME`."""
    return {f"{group}.{name}": convert(v) for name, v in values.items()}


def caption_inputs(ids: torch.Tensor, mask: torch.Tensor, idf: torch.Tensor) -> dict:
    """Caption token ids and their mask (int64) and the vocabulary's IDF weights (float32), under
    the names the lexicon tests read them by."""
    return {"input.ids": i64(ids), "input.mask": i64(mask), "input.idf": f32(idf)}


def save_tensors(path: Path, tensors: dict) -> None:
    """Writes `tensors` to the safetensors file `path`, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path))


def gelu(x):
    """BERT's exact-erf GELU."""
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def layer_norm(x, w, b, eps=LN_EPS):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def linear(x, params, name):
    """`x` through the dense layer `name` of `params` (its `.weight` and `.bias`)."""
    return x @ params[name + ".weight"].T + params[name + ".bias"]


def norm(x, params, name):
    """`x` through the LayerNorm `name` of `params` (its `.weight` and `.bias`)."""
    return layer_norm(x, params[name + ".weight"], params[name + ".bias"])


def rand(*shape, std=0.5):
    """Float64 normal values times `std` from torch's global generator, taking gradients."""
    return (torch.randn(*shape, dtype=torch.float64) * std).requires_grad_(True)


def norm_params(params, name, h):
    """Random float64 weight (about 1) and bias (about 0) of the LayerNorm `name` of width `h`."""
    params[name + ".weight"] = (1 + torch.randn(h, dtype=torch.float64) * 0.1).requires_grad_(True)
    params[name + ".bias"] = rand(h, std=0.1)


def bert_layer_params(params, prefix, h, inter, context=None, attention="attention"):
    """Random float64 parameters (`rand`, `norm_params`) of a `bert_layer` of width `h` with an
    `inter`-wide feed-forward, under `prefix` in `params`: its keys and values read `context`
    wide inputs (`h` by default)."""
    c = h if context is None else context
    for name, (o, n) in {
        attention + ".self.query": (h, h),
        attention + ".self.key": (h, c),
        attention + ".self.value": (h, c),
        attention + ".output.dense": (h, h),
        "intermediate.dense": (inter, h),
        "output.dense": (h, inter),
    }.items():
        params[prefix + name + ".weight"] = rand(o, n, std=0.3)
        params[prefix + name + ".bias"] = rand(o, std=0.1)
    for name in [attention + ".output.LayerNorm", "output.LayerNorm"]:
        norm_params(params, prefix + name, h)


def bert_layer(params, prefix, queries, heads, context=None, attention="attention", bias=None,
               key_mask=None):
    """One post-norm BERT layer (attention, residual, LayerNorm; then GELU feed-forward,
    residual, LayerNorm) with its parameters under BERT's names after `prefix` in `params`.
    `queries` (b, n, h) attend in `heads` heads to `context` (b, m, c; the queries themselves by
    default) through `attention`.self.{query,key,value} (`crossattention` for a cross-attention
    layer); `bias` is added to the attention scores, keys where `key_mask` (b, m) is 0 get none."""
    context = queries if context is None else context
    b, n, h = queries.shape
    m = context.shape[1]
    d = h // heads

    def split(t, length):
        return t.view(b, length, heads, d).transpose(1, 2)

    a = prefix + attention
    q = split(linear(queries, params, a + ".self.query"), n)
    k = split(linear(context, params, a + ".self.key"), m)
    v = split(linear(context, params, a + ".self.value"), m)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    if bias is not None:
        scores = scores + bias
    if key_mask is not None:
        scores = scores.masked_fill(key_mask[:, None, None, :] == 0, float("-inf"))
    ctx = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, n, h)
    x = norm(linear(ctx, params, a + ".output.dense") + queries, params, a + ".output.LayerNorm")
    mlp = linear(gelu(linear(x, params, prefix + "intermediate.dense")), params, prefix + "output.dense")
    return norm(mlp + x, params, prefix + "output.LayerNorm")
