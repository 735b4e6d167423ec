# shellcheck shell=bash disable=SC2034,SC2154
# step: python/tests (the tdiff_capture package) with torch and transformers on the CPU, TDIFF=$(command -v tdiff); PYPKG_TESTS="tests.test_hf.HfTest.test_..." runs only those
#
# A float64 capture of the tiny model within 1e-6 of the reference, the mapping covering every
# stage, isolate, --rope-f64, a bf16 capture, the old capture_hf.py command line, the release
# loader against tdiff; logs and dumps in $OUT/pypkg.
skipping pypkg SKIP_TORCH && return
mkdir -p "$OUT/pypkg"
if [ -n "${PYPKG_TESTS:-}" ]; then  # only these, e.g. tests.test_hf.HfTest.test_isolate
  # shellcheck disable=SC2086
  expect pypkg 0 env OUT="$OUT/pypkg" TDIFF="$(command -v tdiff)" PYTHONPATH=python timeout "$(left)" \
    python3 -m unittest -v $PYPKG_TESTS
else
  expect pypkg 0 env OUT="$OUT/pypkg" TDIFF="$(command -v tdiff)" timeout "$(left)" \
    python3 -m unittest discover -v -s python/tests -t python
fi
note "pypkg: $(grep -E '^(Ran|OK|FAILED)' "$OUT/pypkg.log" | tr '\n' ' ')"
