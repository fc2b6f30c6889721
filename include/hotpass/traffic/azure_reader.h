// Reader for the Azure LLM inference traces (2023): CSV `TIMESTAMP,ContextTokens,GeneratedTokens`
// with CRLF endings, no final newline and 7 fractional digits in the timestamp.
#pragma once

#include <memory>

#include "hotpass/traffic/trace_reader.h"

namespace hp::traffic {

std::unique_ptr<TraceReader> make_azure_reader(LineReader lines, const ReaderOptions &options);

}  // namespace hp::traffic
