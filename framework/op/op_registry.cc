#include "framework/op/op_registry.h"

#include <algorithm>

#include "framework/core/error.h"

namespace mg {

std::string value_type_str(const ValueType& type) {
  std::vector<std::string> dims;
  for (int64_t d : type.shape) dims.push_back(d == kTokens ? "T" : std::to_string(d));
  std::string s = fmt::format("{}[{}]", dtype_name(type.dtype), fmt::join(dims, ", "));
  // Packed FP4 E2M1 codes are the only U8 codes (framework/core/fp4.h); `shape` is the logical one.
  if (type.quant_group && type.dtype == DType::kU8) s += " FP4_E2M1";
  if (type.quant_group) s += fmt::format(" (scales {})", type.quant_group->str());
  return s;
}

OpRegistry& OpRegistry::global() {
  // Leaked on purpose: statics that look ops up while the program exits never see it destroyed.
  static OpRegistry* registry = new OpRegistry();
  return *registry;
}

void OpRegistry::add(std::unique_ptr<OpDef> def) {
  std::string name(def->name());
  MG_ASSERT(!defs_.contains(name), "op '{}' registered twice", name);
  defs_.emplace(std::move(name), std::move(def));
}

const OpDef* OpRegistry::find(std::string_view op) const {
  auto it = defs_.find(std::string(op));
  return it == defs_.end() ? nullptr : it->second.get();
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, def] : defs_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace mg
