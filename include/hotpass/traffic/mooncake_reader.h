// Reader for the Mooncake traces: JSONL with `timestamp` (ms), `input_length`, `output_length`
// and `hash_ids` (one id per 512-token prefix block; equal ids mean a shared prefix).
#pragma once

#include <memory>

#include "hotpass/traffic/trace_reader.h"

namespace hp::traffic {

std::unique_ptr<TraceReader> make_mooncake_reader(LineReader lines, const ReaderOptions &options);

}  // namespace hp::traffic
