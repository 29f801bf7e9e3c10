"""The one error type users see for a bad image.

Every message says what was expected, what was found and what to do, so a
serving log line is enough to fix the input without reading vlmprep's code.
"""
from __future__ import annotations

import re

__all__ = ["ImageError", "ConfigNotFoundError", "describe_source"]

_B64 = re.compile(r"[A-Za-z0-9+/_-]{64}")


class ImageError(ValueError):
    """A per-image failure: bad bytes, unsupported format, a size the family rejects.

    Attributes:
        index: position of the image in the list given to the call (``None`` when
            raised outside a batch, e.g. by ``vlmprep.probe`` on one input).
        source: a short description of the input (``"bytes[1234]"``, a path, ...).
        reason: the message without the index/source prefix.
        item: what ``index`` counts: ``"image"`` (the ``images`` list) or ``"video"`` (the
            ``videos`` list); the message says "video 2: ..." for the third video.
    """

    def __init__(self, reason: str, *, index: int | None = None, source: str | None = None,
                 item: str = "image"):
        self.reason = reason
        self.index = index
        self.source = source
        self.item = item
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.index is not None:
            where.append(f"{self.item} {self.index}")
        if self.source:
            where.append(self.source)
        return f"{' '.join(where)}: {self.reason}" if where else self.reason

    def at(self, index: int | None = None, source: str | None = None,
           item: str | None = None) -> "ImageError":
        """Return this error with its position filled in (keeps values already set; ``item``
        names the list ``index`` counts in when given)."""
        err = ImageError(
            self.reason,
            index=self.index if self.index is not None else index,
            source=self.source if self.source is not None else source,
            item=item or self.item,
        )
        err.__cause__ = self.__cause__
        return err

    def __reduce__(self):  # picklable across worker processes (Ray, multiprocessing)
        return (_rebuild, (self.reason, self.index, self.source, self.item))


class ConfigNotFoundError(FileNotFoundError, ValueError):
    """``Processor.from_pretrained`` found no preprocessor config where it was told to look (a
    local path, or a hub repo: missing, private, offline and not cached). A FileNotFoundError
    (as transformers raises OSError) and a ValueError; its message says expected / got / fix."""


def _rebuild(reason, index, source, item="image"):
    return ImageError(reason, index=index, source=source, item=item)


def describe_source(x: object) -> str:
    """A short, log-safe description of an input item (never its content).

    Never raises: it describes hostile items too (a released memoryview, a closed PIL image,
    an object whose ``shape`` property raises), since it runs while reporting their error.
    """
    try:
        return _describe(x)
    except Exception:  # noqa: BLE001 (the description must not replace the real error)
        t = type(x)
        mod = (t.__module__ or "").split(".")[0]
        return t.__name__ if mod in ("", "builtins") else f"{mod}.{t.__name__}"


def _describe(x: object) -> str:
    if isinstance(x, memoryview):
        return f"memoryview[{x.nbytes}]"  # len() counts items, not bytes, for other formats
    if isinstance(x, (bytes, bytearray)):
        return f"{type(x).__name__}[{len(x)}]"
    name = type(x).__name__
    mod = type(x).__module__ or ""
    if isinstance(x, str) or name.endswith("Path"):
        s = str(x)
        if s[:5].lower() == "data:":  # a data URI holds the content: never log it
            head = s[:s.find(",")] if "," in s[:64] else s[:32]
            return f"{head.replace(chr(0), '')}... [{len(s):,} chars]"
        if "://" in s[:32]:  # a URL: its query may hold a signature or a token
            s = s.split("?", 1)[0].split("#", 1)[0]
        elif len(s) > 120 and _B64.match(s):  # base64 content, not a path
            return f"base64 str[{len(s):,} chars]"
        s = s.replace("\0", "\\0")  # a NUL would cut or corrupt the log line
        return s if len(s) <= 120 else "..." + s[-117:]
    shape = getattr(x, "shape", None)
    if shape is not None:
        return f"{mod.split('.')[0]}.{name}{tuple(shape)} {getattr(x, 'dtype', '')}".strip()
    size = getattr(x, "size", None)
    if mod.startswith("PIL"):
        return f"PIL.Image {getattr(x, 'mode', '?')} {size}"
    return name
