// Prepare/finalize "none": a single rank, or TP/EP without DP (every rank already has all the
// tokens of its TP group). Tokens stay where they are; the experts write the output directly.
// With EP or TP the output is a partial sum the runner all-reduces over the TP group.
#pragma once

#include "ops/moe/kernel/prepare_finalize.h"

namespace mg {

class PrepareFinalizeNone final : public PrepareFinalize {
 public:
  explicit PrepareFinalizeNone(ExpertsShape shape, bool partial_output)
      : PrepareFinalize(std::move(shape)), partial_output_(partial_output) {}

  std::string_view name() const override { return "none"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  bool supports_monolithic() const override { return true; }
  bool forwards_routing() const override { return true; }
  bool output_is_reduced() const override { return !partial_output_; }
  int64_t max_expert_rows(int64_t max_tokens) const override { return max_tokens; }
  size_t workspace_bytes(int64_t max_tokens, bool monolithic) const override;

  DispatchedTokens prepare(const PrepareArgs& args, Workspace& ws,
                           const MoEExecContext& ctx) override;
  void finalize(const DispatchedTokens& tokens, void* out, const MoEExecContext& ctx) override {}
  DispatchedLogits prepare_monolithic(const PrepareArgs& args, Workspace& ws,
                                      const MoEExecContext& ctx) override;
  void finalize_monolithic(const DispatchedLogits& tokens, void* out,
                           const MoEExecContext& ctx) override {}

 private:
  bool partial_output_;
};

}  // namespace mg
