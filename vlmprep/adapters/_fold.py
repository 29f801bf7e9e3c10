"""Qwen patch embedding on compact rows: the temporal kernel folded into one weight.

    compact rows (N, C*P*P) [c, py, px]  ->  patch embeddings (N, E)

A Qwen vision tower embeds a full row ``x[c, t, py, px]`` (T identical frames for an image) with
``Conv3d(C, E, kernel=stride=(T, P, P))``: one dot product per patch,
``y[e] = sum_{c,t,py,px} W[e, c, t, py, px] * x[c, t, py, px] + b[e]``. With every frame equal to
the compact row ``r[c, py, px]`` that is ``sum_{c,py,px} (sum_t W[e, c, t, py, px]) * r[c, py, px]
+ b[e]``: the convolution with the T weight slices summed, bias unchanged, exact in real
arithmetic (only float rounding differs: the sums are associated differently). Stride == kernel,
so that convolution is ``F.linear`` on the flattened row (the same dot products).

``fold_weight`` is computed per call from the tower's live weight (autograd flows back to it);
nothing is stored on the tower.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["fold_weight", "FoldedPatchEmbed", "with_patch_embed"]


def fold_weight(conv: nn.Conv3d) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(E, C*P*P)`` weight (the T slices summed) and the bias, in the conv's dtype.

    float32 / float64 weights sum in their own precision; half types sum in float32 and round
    once (one rounding per weight, as the checkpoint's own rounding)."""
    w = conv.weight                                              # (E, C, T, P, P)
    acc = w if w.dtype in (torch.float32, torch.float64) else w.float()
    folded = acc.sum(dim=2).to(w.dtype).reshape(w.shape[0], -1)  # (E, C*P*P), [c, py, px]
    return folded, conv.bias


class FoldedPatchEmbed(nn.Module):
    """Stands in for a Qwen ``patch_embed`` (its ``proj`` a ``Conv3d``) on compact rows.

    ``forward(rows (N, C*P*P)) -> (N, E)`` in the conv weight's dtype, as ``patch_embed`` gives
    for the full rows. Holds the folded tensors only (no parameters of its own)."""

    def __init__(self, patch_embed: Any) -> None:
        super().__init__()
        weight, bias = fold_weight(patch_embed.proj)
        self.folded_weight = weight
        self.folded_bias = bias

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        w = self.folded_weight
        return nn.functional.linear(rows.reshape(-1, w.shape[1]).to(w.dtype), w, self.folded_bias)


def with_patch_embed(tower: nn.Module, patch_embed: nn.Module) -> nn.Module:
    """A shallow view of ``tower`` whose ``patch_embed`` is ``patch_embed``.

    A new object of the tower's class sharing every attribute, parameter and submodule with the
    tower, except its own ``_modules`` dict: calling it runs the tower's own ``forward`` (which
    reads ``self.patch_embed`` once, first) with the replacement, and the user's tower is never
    written to. So concurrent calls on the same tower (full or compact, any thread) see the
    tower as it is: no swap to undo, nothing to race on. (One exception, transformers' own:
    ``_capture_hooks_first``.)"""
    _capture_hooks_first(tower)
    view = object.__new__(type(tower))
    view.__dict__.update(tower.__dict__)
    view.__dict__["_modules"] = {**tower._modules, "patch_embed": patch_embed}
    return view


def _capture_hooks_first(tower: Any) -> None:
    """transformers installs its output-capturing hooks on a model's blocks lazily, on the first
    call whose config (or kwargs) asks for hidden states / attentions, and marks the model as
    hooked. A view made before that would install a second set on the shared blocks and mark only
    itself (one more set per call). So install them on the tower itself first: the same
    idempotent, lock-protected step the tower's own first call takes."""
    cfg = getattr(tower, "config", None)
    if cfg is None or getattr(tower, "_output_capturing_hooks_installed", False):
        return
    if not (getattr(cfg, "output_hidden_states", False) or getattr(cfg, "output_attentions", False)):
        return
    from transformers.utils.output_capturing import maybe_install_capturing_hooks
    maybe_install_capturing_hooks(tower)
