// The LLTM sequence's persistent kernels (lltm_sequence_persistent.cuh) as the step loops
// of lltm_sequence.cpp take them: a Recurrence, which plans and launches one kernel per
// direction or returns false, having written nothing, where the loop is to run instead.
#pragma once

#include "../lltm_sequence.h"

namespace tensortools::lltm {

// The persistent kernels where the sequence options (lltm_sequence.h) and the device allow
// them. Their launch plan is computed once per device, kernel and shape, under a lock, and
// read from then on: a call costs no device query.
extern const Recurrence kPersistent;

}  // namespace tensortools::lltm
