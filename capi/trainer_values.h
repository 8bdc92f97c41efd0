// The named numbers of a trainer, one table: what ptdp_trainer_get answers,
// the names ptdp_trainer_value_info lists (the Lua module's step result and
// trainer:get read them there), and the list an unknown name's error gives.
#pragma once
#include <string>
#include <vector>

namespace ptdp {
class Trainer;
}

namespace ptdp::capi {

struct TrainerValue {
  const char *name;
  bool step_result;  // in a step's result (Lua's trainer:step() table)
  bool needs_step;   // a value of the last step: wrong_state before the first
  double (*get)(const Trainer &);
};

const std::vector<TrainerValue> &trainer_values();
// The row of `name`, or invalid_argument naming every known one.
const TrainerValue &trainer_value(const std::string &name);

}  // namespace ptdp::capi
