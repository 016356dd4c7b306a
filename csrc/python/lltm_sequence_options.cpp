// The LLTM sequence's options as Python sets and reads them (lltm_sequence_options.h).
#include "lltm_sequence_options.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "../ops/lltm_sequence.h"

namespace tensortools::python {
namespace {

using lltm::SequenceMode;
using lltm::SequenceOptions;

// The modes by the names Python gives them (tensortools.ops.LLTM_SEQUENCE_MODES).
constexpr std::pair<const char*, SequenceMode> kModes[] = {
    {"auto", SequenceMode::kAuto},
    {"loop", SequenceMode::kLoop},
    {"persistent", SequenceMode::kPersistent}};

std::tuple<std::string, int64_t> as_python(SequenceOptions options) {
  for (const auto& [name, mode] : kModes) {
    if (mode == options.mode) {
      return {name, options.max_blocks};
    }
  }
  TORCH_CHECK(false, "lltm_sequence options: unknown mode ", static_cast<int>(options.mode));
}

}  // namespace

void add_lltm_sequence_options(pybind11::module_& m) {
  m.def(
      "_set_lltm_sequence_options",
      [](const std::string& mode, int64_t max_blocks) {
        for (const auto& [name, value] : kModes) {
          if (mode == name) {
            return as_python(lltm::set_sequence_options({value, max_blocks}));
          }
        }
        throw pybind11::value_error("mode must be 'auto', 'loop' or 'persistent', not '" + mode +
                                    "'");
      },
      "_set_lltm_sequence_options(mode, max_blocks): set the LLTM sequence's CUDA path "
      "(max_blocks 0: no cap); returns the previous (mode, max_blocks).");
  m.def(
      "_lltm_sequence_options", [] { return as_python(lltm::sequence_options()); },
      "_lltm_sequence_options(): the LLTM sequence's (mode, max_blocks) in force.");
}

}  // namespace tensortools::python
