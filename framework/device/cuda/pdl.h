// The process-wide switch of programmatic dependent launch (PDL, sm_90+): whether launch_pdl
// (pdl.cuh) sets the programmatic-stream-serialization attribute. Host code only; the kernels'
// side of the contract is in pdl.cuh.
//
// On by default where the device supports it (compute capability 9.0+). `MG_PDL=0` in the
// environment turns it off for the whole process (A/B timing, debugging a suspected ordering bug:
// with it off every launch waits for the previous kernel to finish, as a plain <<<>>> launch
// does); `MG_PDL=1` or unset leaves it on. Tests flip it with set_pdl_enabled. A CUDA graph keeps
// the attributes its kernels were captured with: switching later changes new launches and new
// captures only.
#pragma once

namespace mg::cuda {

// Whether launch_pdl asks for programmatic dependent launch: MG_PDL (read once; any value other
// than 0 or 1 is an error naming the variable), overridden by set_pdl_enabled, and false on a
// device below compute capability 9.0.
bool pdl_enabled();
void set_pdl_enabled(bool enabled);

// What MG_PDL's value asks for: unset (null) or "1" on, "0" off; anything else is an mg::Error
// naming the variable.
bool pdl_requested_by(const char* mg_pdl_value);

// Whether the kernels that may (pdl.cuh, pdl_wait_then_launch) let their successor start before
// their own pdl_wait: MG_PDL_EARLY (read once; unset or "1" on, "0" off, anything else an error
// naming the variable), overridden by set_pdl_early_dependents.
bool pdl_early_dependents();
void set_pdl_early_dependents(bool early);
// What MG_PDL_EARLY's value asks for, as pdl_requested_by.
bool pdl_early_requested_by(const char* mg_pdl_early_value);

}  // namespace mg::cuda
