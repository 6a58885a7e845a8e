"""FusedLoraLinear computes what peft's LoRA linear computes: outputs and gradients, every path."""

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model

from masrl.agents.lora_linear import FusedLoraLinear


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(6, 10)
        self.down = torch.nn.Linear(10, 4, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def pair(dropout=0.0, adapters=("one",)):
    """The same net and adapters twice: peft's own layer, and FusedLoraLinear; B made nonzero."""
    torch.manual_seed(0)
    base = Net()
    nets = []
    for fused in (False, True):
        cfg = LoraConfig(r=3, lora_alpha=6, lora_dropout=dropout, target_modules=["up", "down"])
        if fused:
            cfg._register_custom_module({torch.nn.Linear: FusedLoraLinear})
        net = get_peft_model(copy.deepcopy(base), cfg, adapter_name=adapters[0])
        for name in adapters[1:]:
            net.add_adapter(name, cfg)
        nets.append(net)
    plain, fused = nets
    g = torch.Generator().manual_seed(1)
    for (n, p), (n2, p2) in zip(plain.named_parameters(), fused.named_parameters()):
        assert n == n2
        if "lora_B" in n:  # fresh LoRA B is zero, which would hide a wrong product
            p.data = torch.randn(p.shape, generator=g)
        p2.data = p.data.clone()  # A's random init drew from the global RNG: the same weights on both
    assert isinstance(fused.base_model.model.up, FusedLoraLinear)
    assert not isinstance(plain.base_model.model.up, FusedLoraLinear)
    return plain, fused


def grads(net, x):
    net.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    out = net(x)
    (out * torch.arange(out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    named = {n: p.grad.clone() for n, p in net.named_parameters() if p.grad is not None}
    return out.detach(), x.grad, named


def test_fused_output_and_gradients_equal_peft():
    plain, fused = pair()
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(2))  # 3-D, as a decoder's activations
    out_p, gx_p, g_p = grads(plain, x)
    out_f, gx_f, g_f = grads(fused, x)
    assert out_f.shape == (2, 5, 4)
    torch.testing.assert_close(out_f, out_p, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gx_f, gx_p, atol=1e-5, rtol=1e-5)
    assert g_f.keys() == g_p.keys() and any("lora_A" in k for k in g_f) and any("lora_B" in k for k in g_f)
    for k in g_p:
        torch.testing.assert_close(g_f[k], g_p[k], atol=1e-4, rtol=1e-5)


def test_fused_equals_the_adapter_by_hand():
    # base(x) + scaling * x A^T B^T, scaling = alpha / r = 2, computed from the weights directly.
    _, fused = pair()
    layer = fused.base_model.model.up
    x = torch.randn(7, 6, generator=torch.Generator().manual_seed(3))
    a, b = layer.lora_A["one"].weight, layer.lora_B["one"].weight
    want = x @ layer.base_layer.weight.t() + layer.base_layer.bias + 2.0 * (x @ a.t()) @ b.t()
    torch.testing.assert_close(layer(x), want, atol=1e-5, rtol=1e-5)


def test_other_adapter_disabled_adapter_and_merged_weights():
    plain, fused = pair(adapters=("one", "two"))
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(4))
    for name in ("one", "two"):
        plain.set_adapter(name)
        fused.set_adapter(name)
        torch.testing.assert_close(fused(x), plain(x), atol=1e-5, rtol=1e-5)
    with plain.disable_adapter(), fused.disable_adapter():
        torch.testing.assert_close(fused(x), plain(x), atol=0, rtol=0)
    before = fused(x).detach()
    fused.base_model.model.up.merge()  # merged: the base layer alone, peft's path
    torch.testing.assert_close(fused(x), before, atol=1e-5, rtol=1e-5)


def test_dropout_takes_peft_path():
    # With dropout the fused path would drop the wrong thing: peft's forward must run (same RNG, same output).
    plain, fused = pair(dropout=0.5)
    plain.train()
    fused.train()
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(5))
    torch.manual_seed(9)
    want = plain(x)
    torch.manual_seed(9)
    got = fused(x)
    torch.testing.assert_close(got, want, atol=0, rtol=0)


@pytest.mark.parametrize("grad", [True, False])
def test_no_grad_and_frozen_input(grad):
    # The first adapted layer sees an input that needs no grad; the in-place add must still train A and B.
    plain, fused = pair()
    x = torch.randn(2, 6, generator=torch.Generator().manual_seed(6))
    with torch.set_grad_enabled(grad):
        out = fused(x)
    torch.testing.assert_close(out, plain(x), atol=1e-5, rtol=1e-5)
    assert out.requires_grad == grad
    if grad:
        out.sum().backward()
        assert fused.base_model.model.up.lora_A["one"].weight.grad.abs().sum() > 0
