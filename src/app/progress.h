#pragma once
// The commands' progress lines (base/progress.h), under the names the workflows use.
#include "base/progress.h"

namespace tdiff::app {

using tdiff::Progress;
using tdiff::StatusLine;

}  // namespace tdiff::app
