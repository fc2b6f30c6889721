// nlohmann::json conversions for the plain pieces that Profile and Workload share. from_json
// throws nlohmann::json::exception on a wrong type; profile_from_json / workload_from_json catch
// it and return an hp::Error, so nothing throws across the module boundary.
#pragma once

#include <nlohmann/json.hpp>

#include "hotpass/traffic/batch_shape.h"
#include "hotpass/traffic/distribution.h"
#include "hotpass/traffic/request.h"

namespace hp::traffic {

void to_json(nlohmann::json &json, const Distribution &distribution);
void from_json(const nlohmann::json &json, Distribution &distribution);
void to_json(nlohmann::json &json, const StepShape &shape);  // {"decode":{...},"prefill":[...]}
void from_json(const nlohmann::json &json, StepShape &shape);
void to_json(nlohmann::json &json, const EngineLimits &limits);
void from_json(const nlohmann::json &json, EngineLimits &limits);
void to_json(nlohmann::json &json, const StepCostModel &cost);
void from_json(const nlohmann::json &json, StepCostModel &cost);
void to_json(nlohmann::json &json, const Request &request);  // the request-log object
void from_json(const nlohmann::json &json, Request &request);

// A double rounded to `digits` significant digits, so stored JSON stays readable.
double round_significant(double value, int digits = 6);

}  // namespace hp::traffic
