#include "framework/op/op_registry.h"

#include <algorithm>

#include "framework/core/error.h"

namespace mg {

std::string value_type_str(const ValueType& type) {
  std::vector<std::string> dims;
  for (int64_t d : type.shape) dims.push_back(d == kTokens ? "T" : std::to_string(d));
  std::string s = fmt::format("{}[{}]", dtype_name(type.dtype), fmt::join(dims, ", "));
  if (type.quant_group && type.quant_element != QuantElement::kFromDtype) {
    s += fmt::format(" ({} codes, scales {})", quant_element_name(type.quant_element),
                     type.quant_group->str());
  } else if (type.quant_group) {
    s += fmt::format(" (scales {})", type.quant_group->str());
  }
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
