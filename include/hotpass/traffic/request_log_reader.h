// Reader for hotpass's own request log: one request_to_jsonl() line per request (schema in
// docs/traffic.md), as the serving engine and `hotpass traffic synth` write it.
#pragma once

#include <memory>

#include "hotpass/traffic/trace_reader.h"

namespace hp::traffic {

std::unique_ptr<TraceReader> make_request_log_reader(LineReader lines,
                                                     const ReaderOptions &options);

}  // namespace hp::traffic
