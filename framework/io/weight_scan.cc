#include "framework/io/weight_scan.h"

#include "framework/core/finite.h"
#include "framework/io/graph_loader.h"
#include "framework/io/weight_store.h"

namespace mg {

std::optional<NonFiniteWeight> find_non_finite_weight(const std::filesystem::path& graph_file,
                                                      int64_t* checked) {
  const proto::Model model = load_graph(graph_file);
  WeightStore store(graph_file);
  int64_t scanned = 0;
  for (const proto::TensorInfo& info : model.tensors()) {
    const Tensor t = store.load(info);
    ++scanned;
    const int64_t bad = find_non_finite(t.raw(), t.numel(), t.dtype());
    if (bad >= 0) {
      if (checked) *checked = scanned;
      const std::string file = info.parts_size() > 0 && !info.parts(0).file().empty()
                                   ? info.parts(0).file()
                                   : info.file();
      return NonFiniteWeight{info.name(), file, bad};
    }
  }
  if (checked) *checked = scanned;
  return std::nullopt;
}

}  // namespace mg
