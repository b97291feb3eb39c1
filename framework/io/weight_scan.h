// A scan of a graph's weights for NaN and infinity (`moegraph run --check-weights`).
//
// Non-finite weights make every logit NaN, and the sampler then refuses the step (see
// Session::generate); this scan names the tensor that holds the first bad value. It reads the
// weight files as the graph references them (host mappings, zero-copy), so it works whatever
// device the model later runs on; it reads every byte of every weight once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace mg {

struct NonFiniteWeight {
  std::string tensor;  // the graph's tensor name
  std::string file;    // the weight file it comes from (the first part's, for assembled tensors)
  int64_t element = 0;
};

// The first graph tensor (in graph order) holding a non-finite value, if any. `checked` (when
// given) receives the number of tensors scanned. Throws mg::Error like loading the graph does.
std::optional<NonFiniteWeight> find_non_finite_weight(const std::filesystem::path& graph_file,
                                                      int64_t* checked = nullptr);

}  // namespace mg
