"""Host-to-device staging of a batch's decoded images: one pinned block, reused batch after batch.

A ``non_blocking`` copy from pageable memory is a synchronous copy in disguise (the driver
stages it through its own pinned buffer), so nothing overlaps. Here the host decoders write
their images straight into one page-locked block (each at the offset ``reserve`` hands out),
and ``upload`` moves the used part to the device in one asynchronous copy on the current
stream. The next batch's ``begin`` waits for that copy's event before anything writes into
the block again.

    Given  3 decoded images of 480x640, 1080x1920, 32x32 (HWC uint8)
    begin(upper_bound=7,147,584)  reserve -> offsets 0, 921,600, 7,142,400
    upload() -> uint8 (7,145,472,) on the device; image k is dev[off:off + 3*h*w].view(h, w, 3)

``pin``: page-locked memory needs a CUDA build with a driver; on the CPU (the tests run the same
logic there) the block is plain memory and ``upload`` hands back a copy. The block grows to the
largest batch's decoded bytes, at most ``limit``, and is kept (one per process and device:
``gpu.staging``); an image that does not fit is left to the
caller (``reserve`` returns None: copy it from its own memory).
"""
from __future__ import annotations

import threading

import numpy as np
import torch

__all__ = ["Staging", "STAGING_LIMIT"]

#: The most bytes one block holds (1 GiB): page-locked memory is taken from the OS for good.
STAGING_LIMIT = 1 << 30


class Staging:
    """One reusable host block for ``device``'s uploads (``pin``: page-locked, for cuda)."""

    def __init__(self, device: str, pin: bool, limit: int = STAGING_LIMIT):
        self.device = torch.device(device)
        self.pin = pin
        self.limit = limit
        self.block: torch.Tensor | None = None
        self._array: np.ndarray | None = None
        self._used = 0
        self._event: "torch.cuda.Event | None" = None
        self._lock = threading.Lock()  # reserve() is called from the decode threads
        self.batch_lock = threading.Lock()  # begin .. upload: one batch at a time uses the block

    @property
    def capacity(self) -> int:
        return 0 if self.block is None else int(self.block.numel())

    def begin(self, upper_bound: int) -> None:
        """Start a batch that stages at most ``upper_bound`` bytes: wait until the last upload
        has left the block, grow it when needed (at most ``limit``), reset the offsets."""
        if self._event is not None:
            self._event.synchronize()  # the previous batch's copy has read the block
            self._event = None
        want = min(max(upper_bound, 0), self.limit)
        if want > self.capacity or self.capacity > self.limit:
            size = min(max(want, 2 * self.capacity), self.limit)
            self.block = torch.empty(size, dtype=torch.uint8, pin_memory=self.pin)
            self._array = self.block.numpy()
        self._used = 0

    def reserve(self, nbytes: int) -> int | None:
        """The offset of ``nbytes`` free bytes in the block, or None when they do not fit."""
        with self._lock:
            if self._used + nbytes > self.capacity:
                return None
            off, self._used = self._used, self._used + nbytes
            return off

    def put(self, off: int, image: np.ndarray) -> None:
        """Copy uint8 ``(h, w, 3)`` ``image`` into the block at ``off`` (its reserved bytes)."""
        assert self._array is not None
        dst = self._array[off:off + image.size].reshape(image.shape)
        np.copyto(dst, image)

    def host_view(self, off: int, shape: tuple[int, ...]) -> torch.Tensor:
        """The block's bytes at ``off`` as a uint8 tensor of ``shape`` (a view)."""
        assert self.block is not None
        n = 1
        for s in shape:
            n *= s
        return self.block[off:off + n].view(shape)

    @property
    def used(self) -> int:
        return self._used

    def upload(self) -> torch.Tensor | None:
        """The used bytes on the device, in one copy (asynchronous from page-locked memory, on
        the current stream; its event guards the block); None when nothing was staged."""
        if self._used == 0 or self.block is None:
            return None
        src = self.block[:self._used]
        dev = torch.empty(self._used, dtype=torch.uint8, device=self.device)
        dev.copy_(src, non_blocking=self.pin)
        if self.pin and self.device.type == "cuda":
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(self.device))
        return dev
