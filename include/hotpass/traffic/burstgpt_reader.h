// Reader for the BurstGPT traces: CSV `Timestamp,Model,Request tokens,Response tokens,Total
// tokens,Log Type` with Timestamp in seconds from the start of the trace.
#pragma once

#include <memory>

#include "hotpass/traffic/trace_reader.h"

namespace hp::traffic {

std::unique_ptr<TraceReader> make_burstgpt_reader(LineReader lines, const ReaderOptions &options);

}  // namespace hp::traffic
