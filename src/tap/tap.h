/* The tdiff tap: an inference engine writes its intermediate tensors under tdiff's stage
 * names into a candidate dump, which `tdiff run case.h5 --candidate-dump DUMP` judges stage
 * by stage against the case's float64 reference (the same report as for tdiff's own
 * backends). A C interface, so that engines in any language can call it; tap.hpp wraps it
 * for C++.
 *
 *   tdiff_tap* tap = tdiff_tap_open("dump.h5", "run");
 *   tdiff_tap_attr(tap, "engine", "my-engine 0.3 (ROCm 6.2, gfx90a)");
 *   int64_t shape[3] = {1, 128, 4096};
 *   tdiff_tap_write(tap, "L03.attn.core/o", "bf16", shape, 3, device_copy);
 *   if (tdiff_tap_close(tap) != 0) fprintf(stderr, "%s\n", tdiff_tap_error());
 *
 * Names are "<stage>/<tensor>" as `tdiff info CASE --stages` lists them; dtypes are f64, f32,
 * f16 and bf16 (raw 16-bit patterns), f8_e4m3 (raw bytes), i64, i32, u8 and bool (one byte
 * each); data is row-major.
 * The dump is written to a temporary file and renamed into place by tdiff_tap_close, so a
 * crashed engine leaves no half-written dump. Functions return 0 on success and -1 on error,
 * with the reason in tdiff_tap_error() (per thread); a tap with an error writes nothing more.
 */
#ifndef TDIFF_TAP_H
#define TDIFF_TAP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdiff_tap tdiff_tap;

/* mode: "run" (every stage on the engine's own inputs, as in a normal forward: its own expert
 * and indexer choices followed), "replay" (its own forward, but after each selection stage the
 * engine takes the reference's choices, tdiff_tap_reference, and dumps its own: every stage is
 * judged on the reference's choices) or "isolated" (each stage run on the reference's inputs
 * from the case: local errors, ranked by tdiff). Returns NULL on error. */
tdiff_tap* tdiff_tap_open(const char* path, const char* mode);
/* The case the dump is written on: recorded in the dump (its path and the SHA-256 of its token
 * ids and mask, so that tdiff refuses the dump against other inputs) and opened for
 * tdiff_tap_reference. Needed by "replay" and "isolated"; recommended for "run". */
int tdiff_tap_case(tdiff_tap* tap, const char* case_path);
/* The case's reference tensor `name` ("<stage>/<tensor>", e.g. L03.moe.select/idx) converted to
 * `dtype` into `out`, which holds the given shape (the reference's, size-1 dimensions aside).
 * Replay: after a selection stage, the engine reads the reference's choice into the buffer its
 * later stages read, having written its own with tdiff_tap_write. Isolated: a stage's inputs. */
int tdiff_tap_reference(tdiff_tap* tap, const char* name, const char* dtype, const int64_t* shape, int ndim,
                        void* out);
/* A dump that tdiff asked for (`tdiff bisect|determinism|run|ci --candidate-cmd`): opens the
 * request file (`request`, or $TDIFF_REQUEST when NULL; casefile/engine_request.h), the dump it
 * names in its mode, and its case (as tdiff_tap_case). Returns NULL on error. */
tdiff_tap* tdiff_tap_open_request(const char* request);
/* Before the engine computes stage `name`'s output ("<stage>/<tensor>"): 1 when the request
 * takes that stage from the reference, with `out` (the shape, as `dtype`) filled with the
 * reference's tensor for the engine's later stages to read; 0 when the engine computes it;
 * -1 on error. A tap without a request always answers 0. */
int tdiff_tap_substitute(tdiff_tap* tap, const char* name, const char* dtype, const int64_t* shape, int ndim,
                         void* out);
/* An entry of the dump's environment record (engine, version, device, dtype, ...). */
int tdiff_tap_attr(tdiff_tap* tap, const char* key, const char* value);
/* One tensor, copied before the call returns. Each name may be written once. With the case
 * given (tdiff_tap_case, a request), a stage output's dtype, shape and selection range are
 * checked against the case's tensor contract here (`tdiff info CASE --stages --json`). */
int tdiff_tap_write(tdiff_tap* tap, const char* name, const char* dtype, const int64_t* shape, int ndim,
                    const void* data);
/* Renames the dump into place and frees the tap (also after an error, then writing nothing). */
int tdiff_tap_close(tdiff_tap* tap);
/* Frees the tap and removes its temporary file: the dump is not written. */
void tdiff_tap_discard(tdiff_tap* tap);
/* The last error of this thread ("" if none). */
const char* tdiff_tap_error(void);

#ifdef __cplusplus
}
#endif

#endif /* TDIFF_TAP_H */
