#!/usr/bin/env bash
# aside.sh out | in | restore | list       (here, before and after a GPU session; `restore` on the GPU machine)
#
# A device call carries the whole working tree in at most 64 MiB, and the v2 bundle's pieces fill
# most of that. The tracked files no call needs by default are moved out of the tree to
# .devstage/aside/<same path> (git-ignored, so not carried unless a call names it in `carry`):
#   out      move them aside (before the first call)
#   in       move them back (after the last call, before committing)
#   restore  on the GPU machine: copy back whatever this call carried under .devstage/aside/ (the
#            device preludes run it, so a call that needs the testbed weights carries
#            .devstage/aside/sglang_eagle_paged/testbed/target and .../draft)
#   list     the paths, one a line
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ASIDE=.devstage/aside
PATHS=(
  bench/results
  sglang_eagle_paged/testbed/target/model.safetensors
  sglang_eagle_paged/testbed/draft/model.safetensors
  sglang_eagle_paged/testbed/smollm2-draft/model.safetensors
  sglang_eagle_paged/testbed/smollm2-draft/tokenizer.json
)
case "${1:-}" in
  list) printf '%s\n' "${PATHS[@]}" ;;
  out)
    for p in "${PATHS[@]}"; do
      [ -e "$p" ] || continue
      [ -e "$ASIDE/$p" ] && { echo "aside.sh: $ASIDE/$p exists already: run 'aside.sh in' first" >&2; exit 1; }
      mkdir -p "$(dirname "$ASIDE/$p")" && mv "$p" "$ASIDE/$p"
    done
    echo "aside: $(du -sh "$ASIDE" | cut -f1) in $ASIDE; tracked tree now $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) bytes" ;;
  in)
    for p in "${PATHS[@]}"; do  # every conflict first: nothing moves unless all can
      [ -e "$ASIDE/$p" ] && [ -e "$p" ] && { echo "aside.sh: both $p and $ASIDE/$p exist: resolve by hand" >&2; exit 1; }
    done
    for p in "${PATHS[@]}"; do
      [ -e "$ASIDE/$p" ] || continue
      mkdir -p "$(dirname "$p")" && mv "$ASIDE/$p" "$p"
    done
    git status --short -- "${PATHS[@]}" | head -5 ;;
  restore)
    for p in "${PATHS[@]}"; do
      if [ -e "$ASIDE/$p" ] && [ ! -e "$p" ]; then mkdir -p "$(dirname "$p")" && cp -r "$ASIDE/$p" "$p"; fi
    done ;;
  *) echo "usage: aside.sh out|in|restore|list" >&2; exit 2 ;;
esac
