// The mask family: window_mask, cmp_mask. Masks are integer logic, identical in every
// backend, so emu takes refcpu's.
#include "emu/stage_call.h"

namespace tdiff::emu {

void register_mask(Handlers& h) {
  h.add({OpKind::window_mask, OpKind::cmp_mask}, [](StageCall& k) { return k.refcpu_outputs(); });
}

}  // namespace tdiff::emu
