#!/usr/bin/env bash
# Gets DALI onto the GPU test machine, which has no package registry and receives at most 64 MiB
# per `run` call (the working tree plus the paths named in `carry`). The wheel closure (257 MiB)
# is packed into one archive and split into parts that each fit one call with the tree; the parts
# are sent over consecutive calls while the machine stays warm (ignored paths survive between
# calls), then joined, checked and installed with `pip install --no-index --target`.
#
#   bash bench/dali_transfer.sh prepare    here (with a registry): download, pack, split, MANIFEST;
#                                          prints the `run` calls to make
#   bash bench/dali_transfer.sh receive    there, once per part: which parts are present / missing
#   bash bench/dali_transfer.sh install    there, after the last part: join, verify, install into
#                                          bench/.dali/site (gpu_check.sh puts it on PYTHONPATH)
#
# Environment:
#   PYTHON                        interpreter for pip and the import check (default python3;
#                                 prepare defaults to the project's .venv/bin/python if present)
#   DALI_TRANSFER_WHEELS=DIR      prepare takes the wheels from DIR instead of downloading them
#   DALI_TRANSFER_PART_BYTES=N    part size in bytes (default 52 MiB)
#   DALI_TRANSFER_PYTHON_TAG=cpXY prepare: the target Python (default cp312, the GPU machine's;
#                                 tests use their own); install checks PYTHON against MANIFEST's
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=$ROOT/bench/.dali  # fixed: the printed carry paths and gpu_check.sh's site folder name it
PARTS=$DIR/parts
MANIFEST=$PARTS/MANIFEST
SITE=$DIR/site

DALI_PACKAGE=nvidia-dali-cuda130
DALI_VERSION=2.4.0
PY_TAG=${DALI_TRANSFER_PYTHON_TAG:-cp312}  # the GPU machine's python3 is 3.12
PY_VERSION=${PY_TAG#cp}; PY_VERSION=${PY_VERSION:0:1}.${PY_VERSION:1}
MIB=$((1024 * 1024))
CALL_LIMIT=$((64 * MIB))  # what one `run` call may send: tree + carried paths
MARGIN=$MIB               # room for MANIFEST and files added to the tree before the calls
# 52 MiB: the 257 MiB closure still makes 5 parts (as at 56), with ~6 MiB left for the tree to grow.
PART_BYTES=${DALI_TRANSFER_PART_BYTES:-$((52 * MIB))}
ARCHIVE=dali-$DALI_VERSION-$PY_TAG.tar
# Left out of the closure, with why:
#   numpy: the machine's python3 has it (2.5.x, the one its torch and opencv use); a second copy
#          first on PYTHONPATH would shadow it for every step of gpu_check, and it is 15.7 MB.
EXCLUDE=(numpy)

die() { echo "dali_transfer: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
fsize() { stat -c %s "$1"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# Bytes the `run` tool sends besides the carried paths: tracked and untracked-not-ignored files,
# and shared/ if the checkout has one. Outside a git checkout (tests), the folder less .dali.
tree_bytes() {
  if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    local n
    n=$( (cd "$ROOT" && git ls-files -z -co --exclude-standard \
          | { xargs -0 -r stat -c %s 2>/dev/null || true; } \
          | awk '{ s += $1 } END { print s + 0 }') )
    if [ -d "$ROOT/shared" ]; then n=$((n + $(du -sb "$ROOT/shared" | cut -f1))); fi
    echo "$n"
  else
    du -sb --exclude="$DIR" "$ROOT" | cut -f1
  fi
}

# MANIFEST lines: "key value..."; `part NAME SIZE SHA256` once per part, in join order.
manifest_get() { awk -v k="$1" '$1 == k { $1 = ""; sub(/^ /, ""); print }' "$MANIFEST"; }

check_part_size() {
  local tree total
  tree=$(tree_bytes)
  total=$((PART_BYTES + tree + MARGIN))
  if [ "$PART_BYTES" -le 0 ] || [ "$total" -gt "$CALL_LIMIT" ]; then
    die "a part of $PART_BYTES bytes does not fit one run call: expected part + tree ($tree bytes)" \
        "+ margin ($MARGIN) <= $CALL_LIMIT bytes (64 MiB), got $total;" \
        "fix: DALI_TRANSFER_PART_BYTES=$((CALL_LIMIT - tree - MARGIN)) or less"
  fi
  echo "dali_transfer: per call: a part of at most $(mib "$PART_BYTES") + the tree $(mib "$tree")" \
       "+ margin $(mib "$MARGIN") = $(mib "$total") of the 64 MiB a run call may send"
}

# 0 when every part named in MANIFEST is present with its size and sha256; prints each one's state.
# $1=quiet skips the printing. Sets BAD_PARTS / MISSING_PARTS.
check_parts() {
  local name size hash state
  BAD_PARTS=(); MISSING_PARTS=()
  while read -r name size hash; do
    if [ ! -f "$PARTS/$name" ]; then
      state=missing; MISSING_PARTS+=("$name")
    elif [ "$(fsize "$PARTS/$name")" != "$size" ]; then
      state="BAD (expected $size bytes, got $(fsize "$PARTS/$name"))"; BAD_PARTS+=("$name")
    elif [ "$(sha "$PARTS/$name")" != "$hash" ]; then
      state="BAD (sha256 differs from MANIFEST)"; BAD_PARTS+=("$name")
    else
      state=present
    fi
    [ "${1:-}" = quiet ] || printf '  %-28s %10s bytes  %s\n' "$name" "$size" "$state"
  done < <(manifest_get part)
  [ ${#BAD_PARTS[@]} -eq 0 ] && [ ${#MISSING_PARTS[@]} -eq 0 ]
}

print_run_calls() {
  local name n=0 total
  total=$(manifest_get part | wc -l)
  echo
  echo "Make these run calls back to back (the machine is released after ~30 s idle; if it goes"
  echo "cold, the parts already sent are gone: start again from call 1):"
  while read -r name _; do
    n=$((n + 1))
    echo "  $n/$((total + 1)) run carry=[\"bench/.dali/parts/$name\", \"bench/.dali/parts/MANIFEST\"]" \
         "command=\"bash bench/dali_transfer.sh receive\""
  done < <(manifest_get part)
  echo "  $((total + 1))/$((total + 1)) run command=\"bash bench/dali_transfer.sh install && bash bench/gpu_check.sh\""
}

cmd_prepare() {
  local py=${PYTHON:-}
  if [ -z "$py" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then py=$ROOT/.venv/bin/python; else py=python3; fi
  fi
  check_part_size
  # Idempotent: parts that match a MANIFEST of this version and part size are left as they are.
  if [ -f "$MANIFEST" ] && [ "$(manifest_get dali_version)" = "$DALI_VERSION" ] \
     && [ "$(manifest_get python_tag)" = "$PY_TAG" ] \
     && [ "$(manifest_get part_bytes)" = "$PART_BYTES" ] && check_parts quiet; then
    echo "dali_transfer: parts up to date in $PARTS ($(manifest_get part | wc -l) parts," \
         "$DALI_PACKAGE $DALI_VERSION); nothing to do"
    print_run_calls
    return 0
  fi
  local t0 wheels stage
  t0=$(date +%s)
  stage=$DIR/stage
  rm -rf "$stage" "$PARTS"
  mkdir -p "$stage/wheels" "$PARTS"
  if [ -n "${DALI_TRANSFER_WHEELS:-}" ]; then
    [ -d "$DALI_TRANSFER_WHEELS" ] || die "expected DALI_TRANSFER_WHEELS to be a folder of wheels," \
      "got '$DALI_TRANSFER_WHEELS'; fix: point it at the folder or unset it to download"
    cp "$DALI_TRANSFER_WHEELS"/*.whl "$stage/wheels/"
    echo "dali_transfer: wheels from $DALI_TRANSFER_WHEELS"
  else
    echo "dali_transfer: downloading $DALI_PACKAGE==$DALI_VERSION and its closure for $PY_TAG ..."
    "$py" -m pip download -q -d "$stage/wheels" --only-binary=:all: --implementation cp \
      --python-version "$PY_VERSION" --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      "$DALI_PACKAGE==$DALI_VERSION" \
      || die "expected pip download to fetch $DALI_PACKAGE==$DALI_VERSION, got an error (above);" \
             "fix: check the registry is reachable, or set DALI_TRANSFER_WHEELS to a folder of wheels"
    echo "dali_transfer: download took $(($(date +%s) - t0)) s"
  fi
  local ex w
  for ex in "${EXCLUDE[@]}"; do
    for w in "$stage/wheels/$ex"-*.whl; do
      if [ -e "$w" ]; then echo "dali_transfer: left out $(basename "$w") (the GPU machine has $ex)"; rm -f "$w"; fi
    done
  done
  wheels=$(cd "$stage/wheels" && ls -- *.whl 2>/dev/null || true)
  [ -n "$wheels" ] || die "expected wheels in $stage/wheels, got none; fix: check the download or DALI_TRANSFER_WHEELS"
  # Plain tar: wheels are already deflated, compressing again gains little and costs time.
  (cd "$stage" && tar -cf "$DIR/$ARCHIVE" wheels)
  (cd "$PARTS" && split -b "$PART_BYTES" -d -a 3 "$DIR/$ARCHIVE" "$ARCHIVE.")
  {
    echo "# written by bench/dali_transfer.sh prepare; read by receive and install"
    echo "dali_package $DALI_PACKAGE"
    echo "dali_version $DALI_VERSION"
    echo "python_tag $PY_TAG"
    echo "part_bytes $PART_BYTES"
    echo "archive $ARCHIVE $(fsize "$DIR/$ARCHIVE") $(sha "$DIR/$ARCHIVE")"
    echo "excluded ${EXCLUDE[*]}"
    for w in $wheels; do echo "wheel $w"; done
    for w in "$PARTS/$ARCHIVE".*; do echo "part $(basename "$w") $(fsize "$w") $(sha "$w")"; done
  } > "$MANIFEST.tmp"
  mv "$MANIFEST.tmp" "$MANIFEST"
  rm -rf "${stage:?}" "${DIR:?}/$ARCHIVE"
  echo "dali_transfer: $(manifest_get wheel | wc -l) wheels, archive $(mib "$(manifest_get archive | cut -d' ' -f2)")," \
       "$(manifest_get part | wc -l) parts of at most $(mib "$PART_BYTES") in $PARTS ($(($(date +%s) - t0)) s)"
  manifest_get part | while read -r name size _; do echo "  $name  $(mib "$size")"; done
  print_run_calls
}

need_manifest() {
  [ -f "$MANIFEST" ] || die "expected $MANIFEST, got none; fix: carry bench/.dali/parts/MANIFEST" \
    "with each part (bash bench/dali_transfer.sh prepare prints the calls)"
}

cmd_receive() {
  need_manifest
  echo "dali_transfer: parts of $(manifest_get dali_package) $(manifest_get dali_version) in $PARTS:"
  if check_parts; then
    echo "dali_transfer: all $(manifest_get part | wc -l) parts present; next: bash bench/dali_transfer.sh install"
    return 0
  fi
  if [ ${#BAD_PARTS[@]} -gt 0 ]; then
    die "expected every present part to match MANIFEST, got bad: ${BAD_PARTS[*]}; fix: send those again"
  fi
  # Missing parts are the normal state between calls: one part arrives per call.
  echo "dali_transfer: ${#MISSING_PARTS[@]} part(s) still missing: ${MISSING_PARTS[*]}"
}

cmd_install() {
  local py=${PYTHON:-python3} t0 archive size hash got
  t0=$(date +%s)
  need_manifest
  if ! check_parts; then
    die "expected all parts present and matching MANIFEST, got missing: ${MISSING_PARTS[*]:-none};" \
        "bad: ${BAD_PARTS[*]:-none}; fix: send those parts (run carry=[part, MANIFEST]) while the machine is warm"
  fi
  got=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")') \
    || die "expected $py to run, got an error; fix: PYTHON=/path/to/python3.12"
  [ "$got" = "$(manifest_get python_tag)" ] || die "expected a Python for $(manifest_get python_tag)" \
    "(the wheels' tag), got $got from $py; fix: PYTHON=/path/to/python3.12"
  read -r archive size hash < <(manifest_get archive)
  local names=()
  mapfile -t names < <(manifest_get part | cut -d' ' -f1)
  (cd "$PARTS" && cat "${names[@]}") > "$DIR/$archive"
  [ "$(fsize "$DIR/$archive")" = "$size" ] && [ "$(sha "$DIR/$archive")" = "$hash" ] \
    || die "expected the joined $archive to be $size bytes with sha256 $hash, got another;" \
           "fix: run prepare again here and resend every part"
  rm -rf "$DIR/wheels" "$SITE.tmp"
  tar -xf "$DIR/$archive" -C "$DIR"
  rm -f "$DIR/$archive"
  # Into a temporary folder first: gpu_check.sh takes bench/.dali/site's existence to mean DALI is
  # there, so it appears only once the install and the import check have passed.
  PIP_NO_INDEX=1 "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --disable-pip-version-check --target "$SITE.tmp" "$DIR"/wheels/*.whl \
    || die "expected pip to install the wheels in $DIR/wheels, got an error (above);" \
           "fix: check $py is the machine's Python 3.12"
  got=$(PYTHONPATH="$SITE.tmp${PYTHONPATH:+:$PYTHONPATH}" "$py" -c \
        'import nvidia.dali; print(nvidia.dali.__version__)') \
    || die "expected 'import nvidia.dali' to work from $SITE.tmp, got an error (above);" \
           "fix: a dependency the machine lacks? compare MANIFEST's 'excluded' with $py's packages"
  rm -rf "$SITE"
  mv "$SITE.tmp" "$SITE"
  rm -rf "$DIR/wheels"
  echo "dali_transfer: nvidia.dali $got installed in $SITE ($(($(date +%s) - t0)) s)"
  echo "use: export PYTHONPATH=$SITE\${PYTHONPATH:+:\$PYTHONPATH}   (bench/gpu_check.sh does this itself)"
}

case "${1:-}" in
  prepare) cmd_prepare ;;
  receive) cmd_receive ;;
  install) cmd_install ;;
  *) echo "usage: bash bench/dali_transfer.sh prepare|receive|install (header of this file says more)" >&2; exit 2 ;;
esac
