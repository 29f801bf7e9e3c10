"""transformers image processors built from a checkpoint's preprocessor_config.json (the oracle)."""
from __future__ import annotations

import functools
import json
from pathlib import Path

from vlmprep.bench import hf as bench_hf

#: The checkpoints' preprocessor_config.json files (packaged with vlmprep's presets).
CONFIGS = Path(bench_hf.CHECKPOINTS)


def config(preset: str) -> dict:
    return json.loads((CONFIGS / f"{preset}.json").read_text())


@functools.lru_cache(maxsize=None)
def hf_processor(preset: str, backend: str, raw: bool = False):
    """``backend``: "pil" (the oracle) or "torchvision". ``raw``: no rescale/normalize.

    Built as ``vlmprep bench --compare hf`` builds it (``vlmprep.bench.hf.processor_kwargs``): the
    checkpoint config's values plus what the model's Processor forces, as each family's
    ``vlmprep.presets.<family>.processor_forces`` says (InternVL crop_to_patches, LLaVA-NeXT
    do_pad, Pixtral patch * merge, Gemma 3's pan-and-scan fields).
    """
    import transformers

    from vlmprep import presets
    cfg = config(preset)
    pipe = presets.from_config(cfg)
    kw = bench_hf.processor_kwargs(cfg, pipe)
    if raw:
        kw.update(do_rescale=False, do_normalize=False)
    return getattr(transformers, bench_hf.class_names(cfg)[backend])(**kw)


def hf_outputs(preset: str, backend: str, images: list, raw: bool = False) -> dict:
    return dict(hf_processor(preset, backend, raw)(images, return_tensors="pt"))


def tiny_tokenizer(special=(), words=("describe", "a"), extra=None):
    """A word-level tokenizer built here (no hub): ``[UNK]``, ``[PAD]``, ``words``, then
    ``special`` added as special tokens; ``extra``: transformers' ``extra_special_tokens`` (named
    ones a processor reads, e.g. ``{"image_token": "<|image|>"}``). For checking a processor's
    prompt expansion against a plan's placeholder without the model's tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"[UNK]": 0, "[PAD]": 1, **{w: k + 2 for k, w in enumerate(words)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    kw = {"extra_special_tokens": extra} if extra else {}
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", **kw)
    if special:
        tok.add_tokens(list(special), special_tokens=True)
    return tok
