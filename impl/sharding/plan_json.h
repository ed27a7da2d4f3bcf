// The plan's JSON text form: export and import, with export(import(export(p))) == export(p).
#pragma once

#include <string>
#include <string_view>

#include "impl/sharding/types.h"

namespace shardrec::sharding {

// Current "version" member of the text form.
constexpr int kPlanJsonVersion = 1;

// Writes `plan` as JSON (two-space indented, one shard per line, fixed member order).
std::string PlanToJson(const Plan& plan);

// Parses and validates. Code::kCorrupt for text that is not JSON or lacks/mistypes a required
// member (message has the byte offset); Code::kInvalidArgument for a well-formed plan that
// breaks a rule (message names the table), as ValidatePlan. `out` is untouched on error.
Status PlanFromJson(std::string_view text, Plan* out);

}  // namespace shardrec::sharding
