// MoE families for make-model. Filled in with the MoE layer (ops/moe/).
#include "models/builders/decoder_builder.h"

namespace mg {

void add_moe_families(std::vector<Family>&) {}

}  // namespace mg
