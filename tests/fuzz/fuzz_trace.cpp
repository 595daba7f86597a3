// libFuzzer harness: the Mooncake trace parser (lines, JSON, fields, the total-token cap) on any
// bytes, under both bad-line policies. A statecheck::Error is the expected answer; anything else
// is a finding. Under skip, the kept skipped lines must stay bounded per kind.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/util/error.h"
#include "core/workloads/mooncake_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const statecheck::BadLines policy :
       {statecheck::BadLines::reject, statecheck::BadLines::skip}) {
    std::istringstream in(text);
    try {
      // A small cap so that the cap's path is reached too.
      const statecheck::Trace t =
          statecheck::parse_mooncake_trace(in, "fuzz.jsonl", policy, 1 << 16);
      if (t.skipped.size() > t.skipped_by_kind.size() * statecheck::kTraceSkippedKept) std::abort();
      for (const auto& r : t.requests) (void)statecheck::trace_prompt_tokens(r);
      (void)statecheck::trace_prefix_reuse(t.requests);
    } catch (const statecheck::Error&) {
    }
  }
  return 0;
}
