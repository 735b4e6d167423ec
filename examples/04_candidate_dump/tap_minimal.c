/* The tap from C (any language with a C FFI calls the same four functions): writes the
 * logits of a made-up engine into a candidate dump, and shows what an error looks like.
 *
 *   tap_minimal OUT.h5        exit 0: OUT.h5 holds lm_head/logits [2,3,4] as f32
 */
#include <stdio.h>
#include <string.h>

#include "tap/tap.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUT.h5\n", argv[0]);
    return 2;
  }
  float logits[2 * 3 * 4];
  for (int i = 0; i < 24; ++i) logits[i] = 0.25f * (float)i - 3.0f;
  const int64_t shape[3] = {2, 3, 4};

  tdiff_tap* tap = tdiff_tap_open(argv[1], "run");
  if (!tap) {
    fprintf(stderr, "%s\n", tdiff_tap_error());
    return 1;
  }
  if (tdiff_tap_attr(tap, "engine", "tap_minimal.c") != 0 ||
      tdiff_tap_write(tap, "lm_head/logits", "f32", shape, 3, logits) != 0) {
    fprintf(stderr, "%s\n", tdiff_tap_error());
    tdiff_tap_discard(tap);
    return 1;
  }
  /* A name that is not <stage>/<tensor> is refused with a message; the tap keeps no dump then,
   * so this program writes it into a second tap that it expects to fail. */
  tdiff_tap* bad = tdiff_tap_open(argv[1], "run");
  if (tdiff_tap_write(bad, "logits", "f32", shape, 3, logits) == 0 || strstr(tdiff_tap_error(), "logits") == NULL) {
    fprintf(stderr, "a bad name was accepted\n");
    return 1;
  }
  printf("refused as expected: %s\n", tdiff_tap_error());
  tdiff_tap_discard(bad);
  if (tdiff_tap_close(tap) != 0) {
    fprintf(stderr, "%s\n", tdiff_tap_error());
    return 1;
  }
  printf("%s: lm_head/logits written\n", argv[1]);
  return 0;
}
