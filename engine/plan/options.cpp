// Parsing `ptdp plan` options: Megatron's argument names, checked one by one.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/plan/plan.h"

namespace ptdp::plan {

namespace {

struct Opt {
  const char *key, *help;
};
// Every option, for --help and for the error on an unknown key.
const Opt kOptions[] = {
    {"num_layers", "transformer layers l (required)"},
    {"hidden_size", "hidden size h (required)"},
    {"num_attention_heads", "attention heads a (required)"},
    {"seq_length", "sequence length S (default 2048)"},
    {"vocab_size", "vocabulary V before padding to 128 t (default 51200)"},
    {"ffn_hidden_size", "MLP hidden size (default 4 h)"},
    {"num_query_groups", "grouped-query attention: key/value heads (default: a)"},
    {"swiglu", "flag: SwiGLU MLP (three matrices)"},
    {"normalization", "LayerNorm | RMSNorm (default LayerNorm)"},
    {"position_embedding_type", "learned_absolute | rope (default learned_absolute)"},
    {"untie_embeddings_and_output_weights", "flag: the LM head has its own weight"},
    {"disable_bias_linear", "flag: no biases in the linear layers"},
    {"add_qkv_bias", "flag: a QKV bias even with disable_bias_linear"},
    {"global_batch_size", "global batch B in sequences (required)"},
    {"num_gpus", "devices n = t p d (required)"},
    {"micro_batch_size", "micro-batch b (default: searched)"},
    {"tensor_model_parallel_size", "t (default: searched)"},
    {"pipeline_model_parallel_size", "p (default: searched)"},
    {"data_parallel_size", "d (default: n / (t p))"},
    {"num_layers_per_virtual_pipeline_stage", "layers per model chunk: v = l / (p x this)"},
    {"virtual_pipeline_model_parallel_size", "v, model chunks per pipeline rank (default: searched)"},
    {"pipeline_schedule", "gpipe | 1f1b | interleaved | zbh1 | zbv (default: 1f1b, interleaved when v > 1)"},
    {"scatter_gather_tensors_in_pipeline", "0 | 1 (default 1)"},
    {"no_scatter_gather_tensors_in_pipeline", "flag: scatter/gather off"},
    {"sequence_parallel", "0 | 1 (default 0): layouts with t > 1 shard norms and dropout over s"},
    {"recompute_granularity", "none | selective | full (default: searched)"},
    {"fp16", "flag: fp16 mixed precision (the default)"},
    {"bf16", "flag: bf16 mixed precision"},
    {"fp32", "flag: fp32 training"},
    {"accumulate_allreduce_grads_in_fp32", "0 | 1 (default: 1 for bf16, 0 for fp16)"},
    {"use_distributed_optimizer", "flag: shard the optimizer state over the d replicas"},
    {"machine", "a preset (selene, dgx-h100) or a JSON file (default selene)"},
    {"calibrate", "flag: measure this machine's device (see device) with ptdp's own ops and plan "
                  "for it: the CPU's thread ranks, or GPUs like the one measured (what one GPU "
                  "cannot measure, its links, GPUs per node, memory and price, from machine)"},
    {"device", "what calibrate measures: auto (a GPU when one is visible, else the CPU), cpu, "
               "cuda or cuda:N"},
    {"save_machine", "write the machine description used (e.g. calibrated) to this JSON file"},
    {"train_tokens", "tokens to train on, for days and GPU-hours (default 300B; K/M/B/T suffixes)"},
    {"max_micro_batch_size", "largest b searched (default 64)"},
    {"top", "layouts shown (default 5)"},
    {"explain", "break one layout down, e.g. t=8,p=2,b=4,v=2[,interleaved][,full]"},
    {"format", "text | records (one key=value line per layout)"},
    {"plot", "write a PNG of predicted TFLOP/s per GPU against t, p, d and b"},
};

std::string known_keys() {
  std::string s;
  for (const Opt &o : kOptions) s += (s.empty() ? "" : ", ") + std::string(o.key);
  return s;
}

int64_t whole(const std::string &k, const std::string &v, int64_t lo, int64_t hi) {
  long long x = 0;
  if (!parse_whole(v, &x) || x < lo || x > hi)
    fail(Status::bad_value, k, " must be a whole number in [", lo, ", ", hi, "], got '", v, "'");
  return x;
}

// One of two names: false for the first, true for the second.
bool choice(const std::string &k, const std::string &v, const char *first, const char *second) {
  if (v == first || v == second) return v == second;
  fail(Status::bad_value, k, " must be one of {", first, ", ", second, "}, got '", v, "'");
}

bool flag(const std::string &k, const std::string &v) {
  if (v.empty() || v == "1" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "no") return false;
  fail(Status::bad_value, k, " is a switch: 1/true or 0/false, got '", v, "'");
}

// A value that must be given (an output's path, a layout to explain): empty
// (a bare --plot, or --plot '') would do nothing and say nothing.
std::string needed(const std::string &k, const std::string &v, const char *what) {
  if (v.empty()) fail(Status::bad_value, k, " needs ", what, " (got an empty value)");
  return v;
}

double tokens(const std::string &k, const std::string &v) {
  char *end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  std::string suf = end ? end : "";
  double mult = suf.empty() ? 1 : suf == "K" ? 1e3 : suf == "M" ? 1e6
              : (suf == "B" || suf == "G") ? 1e9 : suf == "T" ? 1e12 : -1;
  // (strtod skips leading white space and takes a '+': a number is written
  // from its first digit or point.)
  const bool plain = !v.empty() && (std::isdigit((unsigned char)v[0]) || v[0] == '.');
  if (!plain || mult < 0 || !(x > 0) || !std::isfinite(x) || hex_number(v))
    fail(Status::bad_value, k, " must be a positive number of tokens (e.g. 300e9 or 300B), got '", v, "'");
  // A training run's tokens: from a thousand to a quintillion (1e300T made
  // the days and the cost infinite).
  if (!(x * mult >= 1e3 && x * mult <= 1e18))
    fail(Status::bad_value, k, " must be in [1e3, 1e18] tokens (1K to 1,000,000T), got '", v, "'");
  return x * mult;
}

}  // namespace

std::string plan_help() {
  std::string s =
      "ptdp plan: predicts PTD-P training of a GPT (the paper's performance and memory model)\n"
      "and ranks the layouts (t, p, d, b, v, schedule, recomputation) by iteration time.\n"
      "Options (Megatron's names, --with-dashes on the command line):\n";
  for (const Opt &o : kOptions) {
    std::string k = o.key;
    for (char &c : k)
      if (c == '_') c = '-';
    s += "  --" + k + std::string(k.size() < 40 ? 40 - k.size() : 1, ' ') + o.help + "\n";
  }
  return s;
}

PlanRequest parse_plan_request(const std::vector<std::pair<std::string, std::string>> &options) {
  PlanRequest r;
  int64_t per_chunk = 0;
  bool dtype_set = false, device_given = false, max_micro_batch_given = false;
  std::set<DType> switched_off;
  std::map<std::string, std::string> spelled;  // option -> the spelling it was given as
  for (const auto &[key0, val] : options) {
    std::string k = key0;
    while (!k.empty() && k[0] == '-') k.erase(0, 1);
    const std::string given = k;  // as spelled: num-layers and num_layers are two spellings
    for (char &c : k)
      if (c == '-') c = '_';
    // Short aliases of the Lua table (t, p, d, b, v).
    if (k == "t") k = "tensor_model_parallel_size";
    if (k == "p") k = "pipeline_model_parallel_size";
    if (k == "d") k = "data_parallel_size";
    if (k == "b") k = "micro_batch_size";
    if (k == "v") k = "virtual_pipeline_model_parallel_size";
    // One option under two spellings (t and tensor_model_parallel_size): which
    // one won depended on a Lua table's order. (The same spelling again is a
    // command line's later flag, which wins, as with argparse.)
    // (The switch and its no_ form set one option: both given is one twice.)
    const std::string option = k == "no_scatter_gather_tensors_in_pipeline" ? "scatter_gather_tensors_in_pipeline" : k;
    if (auto [it, fresh] = spelled.emplace(option, given); !fresh && it->second != given)
      fail(Status::invalid_argument, "plan option ", option, " is given twice, as ", it->second, " and as ",
           given, ": give it once");
    auto dtype = [&](DType d) {
      if (!flag(k, val)) {
        switched_off.insert(d);
        return;
      }
      if (dtype_set && r.train.dtype != d)
        fail(Status::invalid_config, "give one of fp16, bf16 and fp32, not several");
      r.train.dtype = d;
      dtype_set = true;
    };
    if (k == "num_layers") r.model.layers = whole(k, val, 1, 100000);
    else if (k == "hidden_size") r.model.hidden = whole(k, val, 1, 1 << 22);
    else if (k == "num_attention_heads") r.model.heads = whole(k, val, 1, 1 << 16);
    else if (k == "seq_length") r.model.seq = whole(k, val, 1, 1 << 24);
    else if (k == "vocab_size" || k == "padded_vocab_size") r.model.vocab = whole(k, val, 1, 1LL << 32);
    else if (k == "ffn_hidden_size") r.model.ffn = whole(k, val, 1, 1LL << 24);
    else if (k == "num_query_groups") r.model.kv_heads = whole(k, val, 1, 1 << 16);
    else if (k == "swiglu") r.model.swiglu = flag(k, val);
    else if (k == "untie_embeddings_and_output_weights") r.model.untied = flag(k, val);
    else if (k == "disable_bias_linear") r.model.linear_bias = !flag(k, val);
    else if (k == "add_qkv_bias") r.model.qkv_bias = flag(k, val);
    else if (k == "normalization") r.model.rms_norm = choice(k, val, "LayerNorm", "RMSNorm");
    else if (k == "position_embedding_type") r.model.rope = choice(k, val, "learned_absolute", "rope");
    else if (k == "global_batch_size") r.train.global_batch = whole(k, val, 1, 1LL << 32);
    else if (k == "num_gpus") r.train.num_gpus = whole(k, val, 1, 1 << 24);
    else if (k == "micro_batch_size") r.b = (int)whole(k, val, 1, 1 << 20);
    else if (k == "tensor_model_parallel_size") r.t = (int)whole(k, val, 1, 1 << 20);
    else if (k == "pipeline_model_parallel_size") r.p = (int)whole(k, val, 1, 1 << 20);
    else if (k == "data_parallel_size") r.d = (int)whole(k, val, 1, 1 << 24);
    else if (k == "num_layers_per_virtual_pipeline_stage") per_chunk = whole(k, val, 0, 100000);
    else if (k == "virtual_pipeline_model_parallel_size") r.v = (int)whole(k, val, 1, 100000);
    else if (k == "pipeline_schedule") r.schedule = (int)parse_schedule(val);
    else if (k == "scatter_gather_tensors_in_pipeline") r.scatter_gather = flag(k, val);
    else if (k == "no_scatter_gather_tensors_in_pipeline") r.scatter_gather = !flag(k, val);
    else if (k == "sequence_parallel") r.sequence_parallel = flag(k, val);
    else if (k == "recompute_granularity") {
      if (val == "none") r.recompute = (int)Recompute::none;
      else if (val == "selective") r.recompute = (int)Recompute::selective;
      else if (val == "full") r.recompute = (int)Recompute::full;
      else fail(Status::bad_value, "recompute_granularity must be one of none, selective, full; got '", val, "'");
    } else if (k == "fp16") dtype(DType::fp16);
    else if (k == "bf16") dtype(DType::bf16);
    else if (k == "fp32") dtype(DType::fp32);
    else if (k == "accumulate_allreduce_grads_in_fp32") r.grads_fp32 = flag(k, val);
    else if (k == "use_distributed_optimizer") r.train.distributed_optimizer = flag(k, val);
    else if (k == "machine") {
      if (val.empty()) fail(Status::bad_value, "machine needs a preset name or a JSON file");
      r.machine = val;
      r.machine_given = true;
    } else if (k == "calibrate") r.calibrate = flag(k, val);
    else if (k == "device") {
      if (val != "auto" && val != "cpu" && val != "cuda" && val.rfind("cuda:", 0) != 0)
        fail(Status::bad_value, "device '", val, "': allowed are auto, cpu, cuda and cuda:N");
      r.device = val;
      device_given = true;
    }
    else if (k == "save_machine") r.save_machine = needed(k, val, "a file path");
    else if (k == "train_tokens") r.train.train_tokens = tokens(k, val);
    else if (k == "max_micro_batch_size") {
      r.max_micro_batch = (int)whole(k, val, 1, 1 << 20);
      max_micro_batch_given = true;
    }
    else if (k == "top") r.top = (int)whole(k, val, 1, 100000);
    else if (k == "explain") r.explain = needed(k, val, "a layout, e.g. t=8,p=2,b=4,v=2");
    else if (k == "format") {
      if (val != "text" && val != "records")
        fail(Status::bad_value, "format must be text or records, got '", val, "'");
      r.format = val;
    } else if (k == "plot") r.plot = needed(k, val, "a file path");
    else
      fail(Status::unknown_option, "unknown plan option '", key0, "'; known: ", known_keys());
  }
  // fp16=0 (or every switch 0) left the default fp16 planned in silence.
  if (switched_off.count(r.train.dtype))
    fail(Status::invalid_config, dtype_name(r.train.dtype), " is switched off (",
         dtype_name(r.train.dtype), "=0) and no other precision is switched on: give one of fp16, ",
         "bf16 and fp32 (fp16 is the default)");
  if (device_given && !r.calibrate)
    fail(Status::invalid_config, "device '", r.device, "' picks what calibrate measures, but calibrate ",
         "is not given: give calibrate too, or leave device out");
  std::string missing;
  if (!r.model.layers) missing += " num_layers";
  if (!r.model.hidden) missing += " hidden_size";
  if (!r.model.heads) missing += " num_attention_heads";
  if (!r.train.global_batch) missing += " global_batch_size";
  if (!r.train.num_gpus) missing += " num_gpus";
  if (!missing.empty()) fail(Status::invalid_config, "plan needs:", missing, " (see --help)");
  if (r.model.hidden % r.model.heads != 0)
    fail(Status::invalid_config, "num_attention_heads (", r.model.heads, ") must divide hidden_size (",
         r.model.hidden, ")");
  if (r.model.heads % r.model.groups() != 0)
    fail(Status::invalid_config, "num_query_groups (", r.model.groups(),
         ") must divide num_attention_heads (", r.model.heads, ")");
  // As the engine's model refuses them (GptConfig::validate).
  if (r.model.rope && (r.model.hidden / r.model.heads) % 2 != 0)
    fail(Status::invalid_config, "position_embedding_type rope needs an even head dim (hidden_size / "
         "num_attention_heads = ", r.model.hidden / r.model.heads, ")");
  if (per_chunk > 0) {
    if (!r.p) fail(Status::invalid_config, "num_layers_per_virtual_pipeline_stage needs pipeline_model_parallel_size");
    if (r.model.layers % ((int64_t)r.p * per_chunk) != 0)
      fail(Status::invalid_config, "num_layers (", r.model.layers, ") must be divisible by p x num_layers_per_virtual_pipeline_stage (",
           r.p, " x ", per_chunk, ")");
    int v = (int)(r.model.layers / (r.p * per_chunk));
    if (r.v && r.v != v)
      fail(Status::invalid_config, "virtual_pipeline_model_parallel_size (", r.v, ") and num_layers_per_virtual_pipeline_stage (",
           per_chunk, ", so v = ", v, ") disagree");
    r.v = v;
  }
  // A schedule of chunks given at p = 1 (before v > 1 chose interleaved, which
  // was then named as if given).
  const bool chunked = r.schedule == (int)ScheduleKind::interleaved || r.schedule == (int)ScheduleKind::zbv;
  if (chunked && r.p == 1)
    fail(Status::invalid_config, "pipeline_schedule ", r.schedule == (int)ScheduleKind::zbv ? "zbv" : "interleaved",
         " places model chunks on pipeline stages, and pipeline_model_parallel_size is 1: give p >= 2, ",
         "or another schedule");
  if (r.v > 1 && r.schedule < 0) r.schedule = (int)ScheduleKind::interleaved;
  // What the trainer refuses, or what would leave an option unused, as it does.
  if (r.model.qkv_bias && r.model.linear_bias)
    fail(Status::invalid_config, "add_qkv_bias acts only where the linear layers have no biases (the ",
         "QKV projection has one otherwise), and disable_bias_linear is not given: give ",
         "disable_bias_linear, or leave it out");
  if (r.grads_fp32 == 0 && r.train.dtype == DType::fp32)
    fail(Status::invalid_config, "accumulate_allreduce_grads_in_fp32 = 0 needs bf16 or fp16: an fp32 ",
         "run's gradients are fp32");
  if (r.b && max_micro_batch_given)
    fail(Status::invalid_config, "max_micro_batch_size bounds the micro-batch sizes searched, and ",
         "micro_batch_size (", r.b, ") fixes one: give one of them");
  if (r.grads_fp32 >= 0) r.train.grads_fp32 = r.grads_fp32;
  else r.train.grads_fp32 = r.train.dtype == DType::bf16;  // Megatron's default
  return r;
}

}  // namespace ptdp::plan
