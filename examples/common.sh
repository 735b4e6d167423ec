# Sourced by every examples/NN_*/run.sh: the tdiff binary ($TDIFF, default build/tdiff of the
# repository), a work folder (under $OUT when set and kept, else a temporary one removed at
# exit), and `expect CODE CMD...`, which fails the example unless CMD exits with CODE.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TDIFF="${TDIFF:-$root/build/tdiff}"
[ -x "$TDIFF" ] || { echo "$0: no tdiff at $TDIFF (build it, or set TDIFF)" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"   # the example's own folder
name="$(basename "$here")"
if [ -n "${OUT:-}" ]; then
  work="$OUT/$name"; rm -rf "$work"; mkdir -p "$work"
else
  work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fi
cd "$work"
expect() {
  local want="$1"; shift
  local rc=0
  "$@" || rc=$?
  if [ "$rc" -ne "$want" ]; then echo "$name: '$*' exited $rc, expected $want" >&2; exit 1; fi
}
# The tiny model and a case with its reference, as scripts/demo makes them (seconds).
make_tiny_case() {
  "$TDIFF" synth --preset tiny --seed 1 -o tiny >/dev/null
  "$TDIFF" case new --model tiny --tokens "$root/cases/tiny/prompts.txt" --seed 1 --pad-to 48 -o tiny.h5 >/dev/null
  "$TDIFF" golden tiny.h5 >/dev/null 2>&1
}
