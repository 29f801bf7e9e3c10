"""The vLLM plugin (vlmprep.integrations.vllm_plugin) inside the REAL vLLM 0.33 processors.

Oracle: vLLM's own path (transformers' image processors, torchvision backend, as vLLM builds them)
on the same photos, same tiny checkpoints (tests/integration/checkpoints.py). With the plugin on,
``processor.apply`` must give the same prompt ids, mm hashes, placeholder ranges and every mm
kwarg tensor (values and dtype), and vlmprep must have answered (not the fallback).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.engines

from requires import engine  # noqa: E402

engine("vllm", "vLLM")
import torch  # noqa: E402
from _support.imgdata import photo  # noqa: E402

from tests.integration.test_vllm_engine import FAMILIES, Engine, _pil  # noqa: E402
from vlmprep.integrations import vllm_plugin as plugin  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: the engine suite's families and the ones only the plugin is checked on (SmolVLM: vLLM's
#: Idefics3 processor, SmolVLMImageProcessor; transformers' SmolVLMProcessor needs num2words)
PLUGIN_FAMILIES = FAMILIES + ["qwen2.5-vl", "qwen3-vl", "llava-1.5", "llava-onevision", "smolvlm", "glm4v",
                                "lfm2-vl", "llama4", "minicpm-v"]


def _loads(family: str) -> bool:
    """Whether transformers can build the family's processor here (SmolVLM's needs num2words,
    not in requirements/engines.txt yet); the equality test skips the family otherwise."""
    if family != "smolvlm":
        return True
    try:
        import num2words  # noqa: F401
    except ImportError:
        return False
    return True
REQUESTS = [["chelsea"], ["chelsea", "astronaut"], ["coffee@300x451", "astronaut", "chelsea"]]


@pytest.fixture(scope="module")
def switched_on(tmp_path_factory):
    """The plugin registered in this process as vLLM would (VLMPREP_VLLM=1), undone after."""
    from vllm.multimodal import MULTIMODAL_REGISTRY as registry
    mp = pytest.MonkeyPatch()
    mp.setenv(plugin.ENV, "1")
    plugin.register()
    yield mp
    registry.__dict__.pop("create_processor", None)
    from vllm.multimodal.media import ImageMediaIO
    if getattr(ImageMediaIO.load_bytes, "_vlmprep", False):
        ImageMediaIO.load_bytes = ImageMediaIO.load_bytes.__wrapped__
    mp.undo()


def _apply(eng: Engine, names: list[str], cache=None) -> dict:
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs
    items = eng.processor.info.parse_mm_data({"image": _pil(names)})
    return eng.processor.apply(ProcessorInputs(eng.ck.ids(eng.prompt(len(names))), items, cache=cache),
                               TimingContext())


def _same(got: dict, want: dict, what: str) -> None:
    assert got["prompt_token_ids"] == want["prompt_token_ids"], what
    assert got["mm_hashes"] == want["mm_hashes"], what
    assert got["mm_placeholders"] == want["mm_placeholders"], what
    g, w = got["mm_kwargs"]["image"], want["mm_kwargs"]["image"]
    assert len(g) == len(w), what
    for i, (a, b) in enumerate(zip(g, w)):
        assert sorted(a) == sorted(b), (what, i)
        for k in a:
            x, y = a[k].data, b[k].data
            if torch.is_tensor(x):
                assert x.dtype == y.dtype and x.shape == y.shape, (what, i, k, x.dtype, y.dtype, x.shape, y.shape)
                assert torch.equal(x, y), (what, i, k, (x.float() - y.float()).abs().max().item())
            else:
                assert x == y, (what, i, k)


def test_installed_but_off_changes_nothing(monkeypatch):
    from vllm.multimodal import MULTIMODAL_REGISTRY as registry
    monkeypatch.delenv(plugin.ENV, raising=False)
    plugin.register()
    assert "create_processor" not in registry.__dict__


def test_entry_point_is_declared_and_vllm_loads_it(tmp_path, monkeypatch):
    """setup.py declares ``vllm.general_plugins``; vLLM's own loader finds and calls it."""
    text = (ROOT / "setup.py").read_text()
    m = re.search(r'"vllm\.general_plugins":\s*\["([^"]+)"\]', text)
    assert m, "setup.py: expected a vllm.general_plugins entry point"
    assert m.group(1) == "vlmprep = vlmprep.integrations.vllm_plugin:register"
    dist = tmp_path / "vlmprep_ep-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vlmprep-ep\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{m.group(1)}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(plugin.ENV, "1")
    import vllm.plugins as vp
    from vllm.multimodal import MULTIMODAL_REGISTRY as registry
    monkeypatch.setattr(vp, "plugins_loaded", False)
    try:
        vp.load_general_plugins()
        assert getattr(registry.create_processor, "_vlmprep", False)
    finally:
        registry.__dict__.pop("create_processor", None)


def test_every_processor_the_plugin_takes_is_checked_here(switched_on, tmp_path):
    """PROCESSORS (the vLLM processors vlmprep answers in) is exactly the checked families'."""
    families = [f for f in PLUGIN_FAMILIES if _loads(f)]  # SmolVLM's processor is Idefics3's anyway
    assert {type(Engine(f, tmp_path).processor).__name__ for f in families} == plugin.PROCESSORS


@pytest.mark.parametrize("family", PLUGIN_FAMILIES)
def test_outputs_equal_vllms_own_path(switched_on, tmp_path, family):
    """Each request, with vlmprep answering, equals the same request on vLLM's path (the plugin
    falls back to it while VLMPREP_VLLM is unset)."""
    if not _loads(family):
        pytest.skip(f"{family}: transformers' processor needs num2words (pip install num2words)")
    eng = Engine(family, tmp_path)
    for names in REQUESTS:
        switched_on.delenv(plugin.ENV)
        want = _apply(eng, names)
        switched_on.setenv(plugin.ENV, "1")
        before = dict(plugin.STATS)
        got = _apply(eng, names)
        assert plugin.STATS["vlmprep"] > before["vlmprep"], f"{family}: vlmprep did not answer"
        assert plugin.STATS["fallback"] == before["fallback"], f"{family}: fell back"
        _same(got, want, f"{family} {names}")


@pytest.mark.parametrize("family", ["lfm2-vl", "llama4", "minicpm-v"])
def test_split_images_equal_vllms_own_path(switched_on, tmp_path, family):
    """Images large enough to be split into tiles (the photos above are not, for LFM2-VL: its
    image_rows / image_cols / image_sizes for the prompt come from vlmprep's plans), next to one
    that is not: equal vLLM's own path."""
    from PIL import Image
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs
    a, c = _pil(["astronaut", "coffee"])
    images = [a.resize((1500, 1000)), c.resize((700, 2000)), Image.fromarray(photo("chelsea"))]
    eng = Engine(family, tmp_path)

    def run():
        items = eng.processor.info.parse_mm_data({"image": images})
        return eng.processor.apply(ProcessorInputs(eng.ck.ids(eng.prompt(len(images))), items), TimingContext())

    switched_on.delenv(plugin.ENV)
    want = run()
    switched_on.setenv(plugin.ENV, "1")
    before = dict(plugin.STATS)
    got = run()
    assert plugin.STATS["vlmprep"] > before["vlmprep"] and plugin.STATS["fallback"] == before["fallback"]
    _same(got, want, f"{family} split")


def test_qwen_float_pixels_when_device_normalize_is_off(switched_on, tmp_path):
    """vLLM 0.33 normalizes Qwen's pixels on the device by default (uint8 from the processor);
    with mm_device_do_normalize=False the processor gives normalized floats: both exact."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    eng = Engine("qwen2-vl", tmp_path)
    eng.processor = MULTIMODAL_REGISTRY.create_processor(
        ModelConfig(model=str(eng.ck.path), max_model_len=32768, mm_device_do_normalize=False))
    names = ["chelsea", "astronaut"]
    switched_on.delenv(plugin.ENV)
    want = _apply(eng, names)
    switched_on.setenv(plugin.ENV, "1")
    got = _apply(eng, names)
    assert got["mm_kwargs"]["image"][0]["pixel_values"].data.dtype.is_floating_point
    _same(got, want, "qwen2-vl float")


def test_processor_cache_mixes_hits_and_vlmprep_misses(switched_on, tmp_path):
    from vllm.multimodal.cache import MultiModalProcessorOnlyCache
    eng = Engine("qwen2-vl", tmp_path)
    cache = MultiModalProcessorOnlyCache(eng.config)
    first = _apply(eng, ["chelsea"], cache)
    both = _apply(eng, ["chelsea", "astronaut"], cache)  # chelsea from the cache
    switched_on.delenv(plugin.ENV)
    want = _apply(eng, ["chelsea", "astronaut"])
    switched_on.setenv(plugin.ENV, "1")
    _same(both, want, "cache")
    assert first["mm_hashes"]["image"][0] == both["mm_hashes"]["image"][0]


def test_bad_image_is_the_requests_error_and_the_next_request_works(switched_on, tmp_path):
    """An image 3 pixels wide and 1000 high (aspect ratio over Qwen's 200): vLLM's path and the
    plugin both raise ValueError for that request only (vLLM wraps it: "Failed to apply ...");
    vlmprep's says what was expected. (1x1, 3x1000 and 1x300 images give equal outputs or both
    refuse, on all six families: checked once by hand, recorded in docs/how-to/vllm.md.)"""
    from PIL import Image
    eng = Engine("qwen2-vl", tmp_path)
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs
    tiny = Image.new("RGB", (3, 1000))

    def run():
        items = eng.processor.info.parse_mm_data({"image": [tiny]})
        return eng.processor.apply(ProcessorInputs(eng.ck.ids(eng.prompt(1)), items), TimingContext())

    switched_on.delenv(plugin.ENV)
    with pytest.raises(ValueError):
        run()
    switched_on.setenv(plugin.ENV, "1")
    with pytest.raises(ValueError) as ei:
        run()
    chain = f"{ei.value} {ei.value.__cause__} {ei.value.__context__}"
    assert "expected" in chain and "aspect" in chain.lower(), chain
    switched_on.delenv(plugin.ENV)
    want = _apply(eng, ["chelsea"])
    switched_on.setenv(plugin.ENV, "1")
    _same(_apply(eng, ["chelsea"]), want, "after a bad request")


def test_unsupported_keyword_falls_back(switched_on, tmp_path):
    """A keyword that differs from the config (a request's mm_processor_kwargs) is answered by
    transformers' image processor itself."""
    eng = Engine("qwen2-vl", tmp_path)
    ip = eng.processor.info.get_hf_processor().image_processor
    assert type(ip)._vlmprep
    before = dict(plugin.STATS)
    out = ip(_pil(["chelsea"]), return_tensors="pt", image_mean=[0.5, 0.5, 0.5])
    assert plugin.STATS["fallback"] == before["fallback"] + 1
    assert out["pixel_values"].shape[0] > 0


# -- request images as vLLM's server receives them: data: URIs through its media connector -------
def _uri(name: str, fmt: str = "JPEG", mode: str = "RGB", orientation: int = 1) -> str:
    import base64
    import io

    from PIL import Image
    im = _pil([name])[0].convert(mode)
    buf = io.BytesIO()
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    im.save(buf, fmt, quality=90, exif=exif.tobytes()) if fmt == "JPEG" else im.save(buf, fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()


def _fetch_apply(eng: Engine, uris: list[str]) -> tuple[dict, list]:
    from vllm.multimodal.media import MediaConnector
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs
    conn = MediaConnector()
    images = [conn.fetch_image(u) for u in uris]
    items = eng.processor.info.parse_mm_data({"image": images})
    return eng.processor.apply(ProcessorInputs(eng.ck.ids(eng.prompt(len(uris))), items), TimingContext()), images


@pytest.mark.parametrize("family", ["qwen2-vl", "gemma3", "llava-next", "glm4v", "lfm2-vl", "llama4",
                                    "minicpm-v"])
def test_request_jpegs_reach_vlmprep_as_bytes_and_equal_vllms_path(switched_on, tmp_path, family):
    """One request mixing plain JPEGs (left undecoded by vLLM's loader, decoded by vlmprep from
    their bytes), a PNG, a grey JPEG and an EXIF-rotated JPEG (these three decoded by vLLM as
    before): prompt ids, mm hashes, placeholders and every tensor equal vLLM's own path."""
    from vlmprep.integrations.vllm_media import encoded_jpeg
    eng = Engine(family, tmp_path)
    uris = [_uri("chelsea"), _uri("astronaut", "PNG"), _uri("coffee", mode="L"),
            _uri("chelsea", orientation=6), _uri("coffee")]
    switched_on.delenv(plugin.ENV)
    want, plain = _fetch_apply(eng, uris)
    assert all(encoded_jpeg(m.media) is None for m in plain)
    switched_on.setenv(plugin.ENV, "1")
    before = dict(plugin.STATS)
    got, images = _fetch_apply(eng, uris)
    deferred = type(eng.processor).__name__ in plugin.DEFER_DECODE  # Gemma 3, LFM2-VL, Llama 4, MiniCPM-V: vLLM decodes
    assert plugin.STATS["jpeg_bytes"] - before["jpeg_bytes"] == (2 if deferred else 0), plugin.STATS
    assert plugin.STATS["fallback"] == before["fallback"]
    undecoded = [m.media._im is None for m in images]  # never decoded by Pillow
    assert undecoded == ([True, False, False, False, True] if deferred else [False] * 5)
    _same(got, want, f"{family} data: URIs")


def test_deferred_jpeg_keeps_vllms_checks_and_errors(switched_on, tmp_path, monkeypatch):
    """VLLM_MAX_IMAGE_PIXELS refuses as vLLM does; a truncated JPEG (Pillow opens its header,
    cannot decode it) is still that request's ValueError, saying what was expected; a JPEG
    vlmprep refuses but Pillow decodes goes the Pillow way, exact."""
    import base64

    from vllm.multimodal.media import MediaConnector
    eng = Engine("qwen2-vl", tmp_path)
    uri = _uri("chelsea")
    raw = base64.b64decode(uri.split(",", 1)[1])
    conn = MediaConnector()
    import vllm.envs as envs
    monkeypatch.setattr(envs, "VLLM_MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(ValueError, match="VLLM_MAX_IMAGE_PIXELS"):
        conn.fetch_image(uri)
    monkeypatch.setattr(envs, "VLLM_MAX_IMAGE_PIXELS", 0)
    cut = "data:image/jpeg;base64," + base64.b64encode(raw[: len(raw) // 2]).decode()
    with pytest.raises(ValueError) as e:
        _fetch_apply(eng, [cut])
    assert "expected" in f"{e.value} {e.value.__cause__} {e.value.__context__}"
    switched_on.delenv(plugin.ENV)
    want, _ = _fetch_apply(eng, [uri])
    switched_on.setenv(plugin.ENV, "1")
    import vlmprep.integrations.hf_image_processor as hip
    real = hip._run

    def refuse_bytes(proc, flat):  # vlmprep refusing the bytes (e.g. one of its own limits)
        from vlmprep.errors import ImageError
        calls = []

        def proc2(items):
            calls.append(items)
            if any(isinstance(x, bytes) for x in items):
                raise ImageError("expected a JPEG vlmprep takes, got one it refuses (test)")
            return proc(items)
        out = real(proc2, flat)
        assert len(calls) == 2
        return out
    monkeypatch.setattr(hip, "_run", refuse_bytes)
    got, _ = _fetch_apply(eng, [uri])
    _same(got, want, "refused bytes, Pillow's pixels")


# -- videos (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): vLLM's sampled frames through the video processor ------------
def _video_apply(eng: Engine, videos: list) -> dict:
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs
    items = eng.processor.info.parse_mm_data({"video": videos})
    prompt = "".join("<|vision_start|><|video_pad|><|vision_end|>" for _ in videos) + "What happens?"
    return eng.processor.apply(ProcessorInputs(eng.ck.ids(prompt), items), TimingContext())


def _clip(t: int, h: int, w: int, seed: int) -> tuple:
    """A clip of ``t`` frames (a photo panned, so frames differ) and vLLM's metadata for it."""
    import numpy as np
    a = photo("astronaut")
    frames = np.stack([a[(5 * i) % 40:(5 * i) % 40 + h, (7 * i + seed) % 60:(7 * i + seed) % 60 + w]
                       for i in range(t)])
    meta = {"total_num_frames": t, "fps": 2.0, "duration": t / 2.0, "video_backend": "opencv",
            "frames_indices": list(range(t)), "do_sample_frames": False, "height": h, "width": w}
    return np.ascontiguousarray(frames), meta


@pytest.mark.parametrize("family", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"])
@pytest.mark.parametrize("float_pixels", [False, True], ids=["uint8", "float32"])
def test_qwen_videos_equal_vllms_own_path(switched_on, tmp_path, family, float_pixels):
    """A request with three clips of different sizes and lengths (8, 5 and 16 frames: an odd count
    is padded by repeating the last frame): prompt ids, hashes, placeholders and every video tensor
    (pixel_values_videos, video_grid_thw, Qwen2.5-VL's second_per_grid_ts) equal vLLM's path."""
    eng = Engine(family, tmp_path)
    if float_pixels:
        from vllm.config import ModelConfig
        from vllm.multimodal import MULTIMODAL_REGISTRY
        eng.processor = MULTIMODAL_REGISTRY.create_processor(
            ModelConfig(model=str(eng.ck.path), max_model_len=32768, mm_device_do_normalize=False))
    # the third: 16 frames of 240x320 are over Qwen3-VL's whole-clip budget (the class default,
    # 786,432 pixels), so its resize depends on the frame count
    videos = [_clip(8, 240, 320, 0), _clip(5, 97, 333, 3), _clip(16, 240, 320, 5)]
    switched_on.delenv(plugin.ENV)
    want = _video_apply(eng, videos)
    switched_on.setenv(plugin.ENV, "1")
    before = dict(plugin.STATS)
    got = _video_apply(eng, videos)
    assert plugin.STATS["vlmprep"] > before["vlmprep"] and plugin.STATS["fallback"] == before["fallback"], plugin.STATS
    assert got["prompt_token_ids"] == want["prompt_token_ids"]
    assert got["mm_hashes"] == want["mm_hashes"] and got["mm_placeholders"] == want["mm_placeholders"]
    g, w = got["mm_kwargs"]["video"], want["mm_kwargs"]["video"]
    assert len(g) == len(w) == 3
    for a, b in zip(g, w):
        assert sorted(a) == sorted(b)
        for k in a:  # Qwen3-VL's timestamps (the seconds in its prompt) are a list
            x, y = a[k].data, b[k].data
            assert type(x) is type(y), (family, k)
            if torch.is_tensor(x):
                assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), (family, k)
            else:
                assert x == y, (family, k)
    assert g[0]["pixel_values_videos"].data.dtype.is_floating_point == float_pixels  # vLLM casts floats to the model's
