"""Inputs of a batch job: ``discover(inputs)`` -> one ``Unit`` per input; a Unit yields ``Sample``.

    units = discover(["photos/", "shards/000000.tar", "train.parquet", "paths.txt"])
    for u in units:
        n = u.count()                          # cheap: a listing, tar headers, parquet metadata
        for s in u.samples(0, 1000):           # s.id, s.source, s.data (encoded bytes) or s.error
            ...

A reader only reads bytes: nothing here decodes an image (the Processor does, and reports what
it cannot decode). A per-item problem (a missing file, a tar group without an image, a parquet
null, a value over the size cap, a corrupt tar member or parquet page) is a ``Sample`` with
``data=None`` and ``error`` set, never an exception out of ``samples()``. An input that cannot be
read at all (missing, not a tar / parquet, an image column of the wrong type) is a ValueError
from ``discover()`` naming it. Every read is bounded by ``max_bytes`` (default: the decode op's
``max_source_bytes`` default, vlmprep.ops.DEFAULT_MAX_SOURCE_BYTES; pass the Processor's own).

Videos (``discover(videos=True)``, the default; a batch job passes False for a family without
a video rule, whose units read exactly the images they always read): a video file is one sample
like an image, its bytes under the same ``max_bytes`` cap. Folders also match
``VIDEO_EXTENSIONS`` (mp4, mkv, webm, avi, mov; after the image extensions), a tar group with no
image member takes its video member, a parquet file's column may be one of ``VIDEO_COLUMNS``.
``Sample.video`` is True when the name the data came under (file, member, list line, parquet
column or struct path) has a video extension; ``vlmprep.batch.rows`` routes such a sample, or
one whose first bytes are a video container, to the Processor's video path.

Nothing is lost silently. A part of an input that cannot be read (a damaged or cut tar region,
a parquet row group whose pages do not read, rows a reader did not give) is an error sample with
``damaged=True``, and the readable rest is still read; a batch job that meets one ends with
``complete`` False. ``count()`` always equals the samples ``samples()`` gives. A tar, parquet or
list file changed after discover() counted it (``Unit.stamp``: size and content fingerprint) is
a ValueError from ``count()`` / ``samples()``, never samples shifted to another version.

Kinds, ids and order (the same for every call, on every machine holding the same files):

- ``folder`` (a directory): every file under it, recursively, whose name matches ``glob``;
  default: the image extensions ``IMAGE_EXTENSIONS`` (any case). A ``glob`` with a "/" is matched
  against the relative path, one without against the file name; a leading ``**/`` also matches
  at the top level (fnmatch rules: ``*`` crosses "/"; case-sensitive). Names starting with "."
  (files and folders) are skipped. Symbolic links are followed; a folder already visited (a
  link loop, or two links to one folder) is listed once. Id = the relative posix path
  ("a/b/c.jpg"; bytes that are not UTF-8 are written as ``\\xNN``). Order: sorted by relative
  path. A sub-folder that cannot be listed is one error sample, id = its path + "/".
- ``tar`` (``.tar``, ``.tar.gz``, ``.tgz``; WebDataset; gzip, bz2 or xz detected by content):
  regular members grouped by key, as webdataset does: key = the member path up to the first "."
  of its base name ("d/000001" for "d/000001.seg.png"), extension = the rest, lower-cased;
  members without a "." in the base name are ignored. Id = key. Order: the order in which keys
  first appear in the tar. The image is the group's member with the first extension of
  ``IMAGE_EXTENSIONS`` present (jpg, jpeg, png, webp, ...); a group without one is an error
  sample, and so is one whose image member is a symbolic or hard link (never followed; a link
  that is not the image is ignored). A repeated member (same key and extension) keeps the
  first. Headers: ustar, GNU
  (long names), pax (``path``, ``size``; global headers ignored), v7; read by our own walker
  (``tar_walk.walk``), member data read by offset. Damage (``damaged`` error samples, messages
  expected / got / fix): bytes that are not a valid header where one must be are one error
  sample, id "@{offset}" (offset in the tar's bytes; of a compressed tar, in its decompressed
  stream), and the walk resumes at the next valid ustar header found by scanning forward (any
  alignment: a span cut out shifts the rest); a group with a member that is cut (the data ends
  inside it) or whose size is false (a valid header lies inside its stated data or padding; a
  pax size that disagrees with its header's size, or that no header after it confirms) is an
  error sample;
  non-zero bytes after the end-of-archive zero blocks, a tar that ends without them, and a
  compressed stream that is cut, corrupt or followed by other bytes are "@{offset}" error
  samples. Zero blocks followed by a valid header read on (concatenated tars). discover() also
  counts the tar's headers independently (a plain scan for every valid ustar header, following
  no size) and refuses, naming the tar, one holding a header the walk did not read (a size that
  lands exactly on a later header, or an uncompressed tar stored inside the shard).
- ``parquet`` (``.parquet``, ``.pq``): rows in file order. Image column = ``column``, else the
  first of ``IMAGE_COLUMNS`` (image, jpg, jpeg, png, webp, img, bytes) whose type holds images,
  else the only such column. Types: binary (large_binary, binary_view) and the Hugging Face
  datasets ``struct<bytes: binary, path: string>`` (its bytes; when they are null, the file at
  ``path``, relative to the parquet file's folder, under the input root: below). Id =
  str(value of ``id_column``) (a string or integer column; a null id is an error sample with
  the default id) else ``row-{n}`` (n = the 0-based row index in the file). Ids from
  ``id_column`` must be unique in a file; that is not checked here. Before pyarrow reads a row
  group, the page headers of the columns read are read from the file (``thrift.chunk_pages``): a page
  whose uncompressed size is over ``parquet._page_limit`` (more than its values can hold at
  ``max_bytes`` each, or more than max(max_bytes, 256 MiB)) is never decompressed: its rows are
  error samples naming the page, and the row group's other rows error samples saying why
  (pyarrow reads a row group's pages together). Page headers that do not parse, a damaged page,
  and rows a row group's metadata counts that pyarrow does not give are ``damaged`` error
  samples. A row group gives at most as many rows as each of its column chunks holds values (a
  row is at least one value of each column): one declaring more is damaged, its rows that many
  error samples, not read; footer column chunks that do not read give no rows. A footer whose
  row count disagrees with its row groups or their chunks is one more error sample, id
  "@row-{n}".
- ``list`` (``.txt``, ``.lst``): one image path per line, relative to the list file's folder,
  under the input root (below); blank lines and lines starting with "#" are skipped; spaces at
  both ends are stripped; UTF-8. Id = the line. A line repeated gets ``#2``, ``#3``, ... on its
  later ids (the image is read each time, as listed). Order: the lines' order. The entries are
  counted again by line ends (\\n, \\r\\n, \\r): a line holding another line break (\\x0b,
  \\x85, \\u2028, ...) is a ValueError, not two paths.

Paths inside data (list lines, parquet ``path`` values) are data, not the caller's choice: one
is read only when it resolves under the unit's input root (``discover(input_root=)``, ``vlmprep
run --input-root``; default: the input's own folder): joined to the input's folder, symbolic links
resolved (realpath), then compared. An absolute path elsewhere, a ``..`` leaving the root, a link
inside the root to a file outside it, and anything under ``NEVER_READ`` (/proc, /dev, /sys:
never, whatever the root) are error samples "expected a path under ROOT ..., got ...". The open
does not follow a link as the last component (O_NOFOLLOW) and, on Linux, the opened file's own
path (/proc/self/fd) is checked again, so a path swapped for a link after the check is refused
(``paths.read_unit_path``). Tar members are never resolved as paths (links are not followed). No
error here or in the decoder's messages quotes the bytes read.

``Sample.source`` (for messages): "photos/a/b.jpg", "000000.tar#000001", "train.parquet#17"
(row index), "paths.txt#3" (line number, from 1).

Unit names (for shard names): the input's base name without its extension ("photos",
"000000", "train"), characters other than letters, digits, ".", "_" and "-" replaced by "_",
at most 80 characters. Unique in the job, compared without case: the second "x" (in input
order) is "x-2", then "x-3", ... (skipping names already taken).

Inputs: a folder, a file of a kind above, or a pattern with * ? [ (matched when no such path

Modules (one per input kind, and what they share):

- ``discover``: ``discover()``, unit names, the input patterns.
- ``unit``: ``Unit`` (count / samples go to its kind's reader), the kinds and suffixes, stamps.
- ``sample``: ``Sample``, ``IMAGE_EXTENSIONS``.
- ``paths``: ``read_data_path`` and the input root (paths named inside data).
- ``folder``, ``lists``: the folder and path-list kinds.
- ``tar`` (WebDataset groups, the index, the independent header count), ``tar_walk`` (the
  header walker), ``tar_bytes`` (plain and compressed byte sources, byte-level header checks).
- ``parquet`` (rows through pyarrow), ``thrift`` (our footer and page-header reader).
"""
from __future__ import annotations

from . import folder, lists, parquet, tar  # noqa: F401  (each registers its reader with Unit)
from .discover import discover
from .parquet import IMAGE_COLUMNS, VIDEO_COLUMNS
from .paths import NEVER_READ, read_data_path
from .sample import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, Sample
from .unit import KINDS, Unit

__all__ = ["Sample", "Unit", "discover", "read_data_path", "KINDS", "IMAGE_EXTENSIONS",
           "VIDEO_EXTENSIONS", "IMAGE_COLUMNS", "VIDEO_COLUMNS", "NEVER_READ"]
