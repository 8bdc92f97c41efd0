#include "engine/train/config.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "engine/core/status.h"
#include "engine/core/utf8.h"
#include "engine/core/text.h"
#include "engine/model/gpt_config.h"

namespace ptdp {

namespace {
constexpr double kBig = 1e18;

// The model's options, from GptConfig's field table, then `rest`.
std::vector<OptionSpec> with_model_options(const std::vector<OptionSpec> &rest) {
  std::vector<OptionSpec> s;
  for (const GptConfigField &f : gpt_config_fields()) {
    const OptionSpec::Type type = f.kind == GptConfigField::Int      ? OptionSpec::Int
                                  : f.kind == GptConfigField::Choice ? OptionSpec::Choice
                                                                     : OptionSpec::Float;
    s.push_back({f.name, type, f.option_default, f.option_min, f.option_max, f.choices,
                 f.option_help});
  }
  s.insert(s.end(), rest.begin(), rest.end());
  return s;
}

}  // namespace

const std::vector<OptionSpec> &option_schema() {
  using T = OptionSpec;
  static const std::vector<OptionSpec> schema = with_model_options({
      // batch and schedule
      {"micro_batch_size", T::Int, "8", 1, 1 << 20, nullptr, "samples per micro-batch b"},
      {"global_batch_size", T::Int, "32", 1, 1 << 30, nullptr, "samples per optimizer step"},
      {"train_iters", T::Int, "1000", 0, kBig, nullptr, "optimizer steps of the run"},
      {"seed", T::Int, "1234", 0, kBig, nullptr, "RNG seed (init, dropout, data order)"},
      // optimizer
      {"lr", T::Float, "1e-3", 0, 10, nullptr, "peak learning rate"},
      {"min_lr", T::Float, "1e-4", 0, 10, nullptr, "learning rate at the end of decay"},
      {"lr_warmup_iters", T::Int, "0", 0, kBig, nullptr, "linear warmup steps"},
      {"lr_decay_iters", T::Int, "0", 0, kBig, nullptr, "decay steps (0 = train_iters)"},
      {"lr_decay_style", T::Choice, "cosine", 0, 0, "constant,linear,cosine", "decay shape"},
      {"weight_decay", T::Float, "0.01", 0, 10, nullptr, "decoupled weight decay"},
      {"adam_beta1", T::Float, "0.9", 0, 0.999999, nullptr, "Adam beta1"},
      {"adam_beta2", T::Float, "0.95", 0, 0.999999999, nullptr, "Adam beta2"},
      {"adam_eps", T::Float, "1e-8", 1e-30, 1, nullptr, "Adam epsilon"},
      {"clip_grad", T::Float, "1.0", 0, 1e9, nullptr, "global gradient-norm clip (0 = off)"},
      // data
      {"data_path", T::String, "", 0, 0, nullptr,
       "token dataset: a ptdp file, a Megatron PREFIX (PREFIX.bin + PREFIX.idx), or a blend W1 P1 W2 P2 "
       "... (empty: the caller feeds every batch, step_tokens)"},
      {"split", T::String, "98,2", 0, 0, nullptr, "train,valid[,test] weights over documents"},
      {"tokenizer_type", T::Choice, "byte", 0, 0, "byte,GPT2BPETokenizer,HuggingFaceTokenizer",
       "tokenizer: bytes, GPT-2's byte-level BPE (with vocab_file + merge_file or "
       "tokenizer_file), or a Hugging Face tokenizer.json of GPT-2's, LLaMA 3's or "
       "LLaMA 2's / Mistral's kind (with tokenizer_file)"},
      {"vocab_file", T::String, "", 0, 0, nullptr, "GPT2BPETokenizer's vocab.json"},
      {"merge_file", T::String, "", 0, 0, nullptr, "GPT2BPETokenizer's merges.txt"},
      {"tokenizer_file", T::String, "", 0, 0, nullptr,
       "GPT2BPETokenizer from a Hugging Face tokenizer.json (instead of vocab_file + merge_file)"},
      {"eval_iters", T::Int, "10", 1, 1e9, nullptr, "batches per evaluation"},
      // parallelism
      {"tensor_model_parallel_size", T::Int, "1", 1, 4096, nullptr, "tensor-parallel degree t"},
      {"pipeline_model_parallel_size", T::Int, "1", 1, 4096, nullptr, "pipeline-parallel degree p"},
      {"data_parallel_size", T::Int, "1", 1, 1 << 20, nullptr, "data-parallel degree d"},
      {"num_layers_per_virtual_pipeline_stage", T::Int, "0", 0, 4096, nullptr,
       "layers per model chunk: v = num_layers / (p x this) chunks per rank (0 = v of 1)"},
      {"pipeline_schedule", T::Choice, "auto", 0, 0, "auto,gpipe,1f1b,interleaved,zbh1,zbv",
       "pipeline schedule (auto = interleaved when v > 1, else 1f1b)"},
      {"sequence_parallel", T::Int, "0", 0, 1, nullptr,
       "with t > 1, the norms, dropout and residual on s/t positions per tensor rank: "
       "all-gather before the column-parallel GEMMs, reduce-scatter after the row-parallel "
       "ones (1 = on; needs seq_length divisible by t)"},
      {"scatter_gather_tensors_in_pipeline", T::Int, "1", 0, 1, nullptr,
       "with t > 1, send 1/t of each boundary tensor and all-gather it (1 = on)"},
      {"use_flash_attn", T::Int, "0", 0, 1, nullptr,
       "fused attention that keeps no [s, s] probabilities (1 = on; the same function and dropout)"},
      {"recompute_granularity", T::Choice, "none", 0, 0, "none,full,selective",
       "activation recomputation (full = whole layers; selective = the attention core's "
       "probabilities)"},
      {"recompute_method", T::Choice, "uniform", 0, 0, "uniform,block",
       "uniform: units of recompute_num_layers; block: that many layers per chunk"},
      {"recompute_num_layers", T::Int, "1", 1, 4096, nullptr, "layers per recomputed unit or block"},
      {"ddp_bucket_size", T::Int, "1000000", 1, 1 << 30, nullptr,
       "gradient elements per data-parallel all-reduce"},
      {"overlap_grad_reduce", T::Int, "0", 0, 1, nullptr,
       "reduce each gradient bucket over the data-parallel replicas while the backward goes on, "
       "on a communication thread per rank (1 = on; the same result)"},
      {"use_distributed_optimizer", T::Int, "0", 0, 1, nullptr,
       "shard the fp32 master weights and Adam's moments over the data-parallel ranks: "
       "gradients reduce-scattered, each rank updates its shard, parameters all-gathered "
       "(1 = on; the same result)"},
      {"comm_timeout", T::Float, "300", 0.001, 1e6, nullptr,
       "seconds a rank waits in a communication before the job fails"},
      // checkpoints
      {"save", T::String, "", 0, 0, nullptr, "directory to save checkpoints into (iter_N/ under it)"},
      {"save_interval", T::Int, "0", 0, kBig, nullptr,
       "iterations between checkpoints when save is set (0 = only after the last iteration)"},
      {"load", T::String, "", 0, 0, nullptr,
       "checkpoint to start from: a save directory (its newest complete checkpoint) or one iter_N"},
      {"async_save", T::Int, "0", 0, 1, nullptr,
       "1 = a save copies the state to host memory and writes it on a background thread while "
       "training goes on (one process; the next save, a load and the end wait for it)"},
      {"keep_last_checkpoints", T::Int, "0", 0, 1e9, nullptr,
       "keep only the newest N complete checkpoints (0 = keep all)"},
      // preemption and time limits (Megatron's flags)
      {"exit_signal_handler", T::Int, "0", 0, 1, nullptr,
       "1 = on SIGTERM or SIGINT finish the step, save (with save set) and end the run (a second "
       "signal ends it at once)"},
      {"exit_interval", T::Int, "0", 0, kBig, nullptr,
       "end the run (saving first, with save set) after the iteration that is a multiple of N "
       "(0 = off)"},
      {"exit_duration_in_mins", T::Float, "0", 0, 1e9, nullptr,
       "end the run (saving first, with save set) while the next step and a save still fit in M "
       "minutes since the trainer started (0 = off)"},
      {"verify_checkpoint", T::Int, "1", 0, 1, nullptr,
       "check every block loaded against its manifest checksum (1 = on)"},
      {"override_opt_param_scheduler", T::Int, "0", 0, 1, nullptr,
       "1 = take the LR schedule of this run even when the loaded checkpoint's differs"},
      {"finetune", T::Int, "0", 0, 1, nullptr,
       "1 = take only the weights of load: a fresh optimizer, iteration 0, LR schedule and data "
       "position (Megatron's --finetune)"},
      // metrics
      // Mixed precision (Megatron's flags; ARCHITECTURE §3)
      {"bf16", T::Int, "0", 0, 1, nullptr, "bfloat16 parameters, activations and gradients (fp32 master weights)"},
      {"fp16", T::Int, "0", 0, 1, nullptr, "float16 parameters, activations and gradients, with loss scaling"},
      {"accumulate_allreduce_grads_in_fp32", T::Int, "1", 0, 1, nullptr,
       "16-bit runs: accumulate and all-reduce gradients in fp32 (0 = in the 16-bit type)"},
      {"loss_scale", T::Float, "1", 1e-30, 1e30, nullptr,
       "static loss scale for a 16-bit run (unset: dynamic scaling in fp16, none in bf16)"},
      {"initial_loss_scale", T::Float, "4294967296", 1e-30, 1e30, nullptr, "fp16: the dynamic loss scale to start from"},
      {"min_loss_scale", T::Float, "1", 1e-30, 1e30, nullptr, "fp16: the dynamic loss scale's floor"},
      {"loss_scale_window", T::Int, "1000", 1, kBig, nullptr,
       "fp16: clean steps in a row after which the loss scale doubles"},
      {"hysteresis", T::Int, "2", 1, kBig, nullptr,
       "fp16: overflows after which the loss scale halves (refilled when it grows)"},
      {"timeline", T::String, "", 0, 0, nullptr,
       "write each step's per-rank timeline to this Chrome trace JSON file (Perfetto)"},
      {"profile_ops", T::String, "", 0, 0, nullptr,
       "write each step's device time per op (calls, ms, share, TFLOP/s) of every rank to this "
       "text file"},
      // machine
      {"num_threads", T::Int, "0", 0, kMaxProcessThreads, nullptr, "CPU threads of the process (0 = all cores)"},
      {"device", T::String, "auto", 0, 0, nullptr,
       "each rank's device: auto (cuda when a GPU is visible, else cpu), cpu, cuda (rank r on "
       "GPU r mod count) or cuda:N"},
      {"distributed_backend", T::Choice, "auto", 0, 0, "auto,nccl,host",
       "how GPU ranks communicate: nccl (one rank per GPU), host (the threads/mpi backends "
       "through host copies; ranks may share a GPU), auto (nccl for groups of several ranks "
       "when the build has NCCL and no two ranks of a process share a GPU, else host)"},
  });
  return schema;
}

const OptionSpec *find_option(const std::string &key) {
  for (const auto &o : option_schema())
    if (key == o.key) return &o;
  return nullptr;
}

std::string option_keys_list() {
  std::string s;
  for (const auto &o : option_schema()) {
    if (!s.empty()) s += ", ";
    s += o.key;
  }
  return s;
}

std::string number_text(double x) {
  if (std::isnan(x)) return "nan";  // (printf writes a NaN's sign: "-nan" from Lua's 0/0)
  char buf[32];
  for (int digits = 15; digits <= 17; digits++) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

namespace {
void validate_value(const OptionSpec &o, const std::string &v) {
  // An integer's bounds in the digits it takes (1e+18 read as allowing '1e9').
  auto bound = [&](double x) {
    return o.type == OptionSpec::Int ? std::to_string((long long)x) : number_text(x);
  };
  auto range = [&]() { return "[" + bound(o.min) + ", " + bound(o.max) + "]"; };
  // A text of white space alone is no path or list: ' ' was read as "not
  // set" (data_path) or as a directory named ' ' (save).
  if (o.type == OptionSpec::String && !v.empty() && v.find_first_not_of(" \t\n\r\f\v") == std::string::npos)
    fail(Status::bad_value, o.key, " is white space alone; give a value, or '' to leave it unset");
  // strtoll and strtod skip leading white space: ' 4' was taken, '4 ' not.
  if ((o.type == OptionSpec::Int || o.type == OptionSpec::Float) && !v.empty() &&
      std::isspace((unsigned char)v.front()))
    fail(Status::bad_value, o.key, " must be a number in ", range(), " without spaces, got '", one_line_text(v), "'");
  if (o.type == OptionSpec::Int) {
    long long x = 0;
    if (!parse_whole(v, &x))
      fail(Status::bad_value, o.key, " must be an integer in ", range(), ", got '", one_line_text(v), "'");
    // In integers: the bounds are whole numbers below 2^63, and x as a double
    // would round (1e18 + 64 to 1e18, inside the range).
    if (x < (long long)o.min || x > (long long)o.max)
      fail(Status::bad_value, o.key, " must be in ", range(), ", got ", x);
  } else if (o.type == OptionSpec::Float) {
    char *end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x) || hex_number(v))
      fail(Status::bad_value, o.key, " must be a number in ", range(), " (decimal digits), got '", one_line_text(v), "'");
    // Written non-zero but read as 0 (1e-400, below the smallest double): lr 1e-400 became lr 0.
    const std::string mantissa = v.substr(0, v.find_first_of("eE"));
    if (x == 0 && mantissa.find_first_of("123456789") != std::string::npos)
      fail(Status::bad_value, o.key, " is ", v, ", too small to be told from 0 (the smallest ",
           "number above 0 is about 4.9e-324)");
    if (x < o.min || x > o.max) fail(Status::bad_value, o.key, " must be in ", range(), ", got ", v);
  } else if (o.type == OptionSpec::Choice) {
    std::stringstream ss(o.choices);
    std::string c;
    while (std::getline(ss, c, ','))
      if (c == v) return;
    fail(Status::bad_value, o.key, " must be one of {", o.choices, "}, got '", one_line_text(v), "'");
  }
}
}  // namespace

void Config::set(const std::string &key, const std::string &value) {
  const OptionSpec *o = find_option(key);
  if (!o) fail(Status::unknown_option, "unknown option '", one_line_text(key), "'; known options: ", option_keys_list());
  validate_value(*o, value);
  // An integer kept in one spelling ("007" is 7): what is read back, logged
  // and recorded is the value, not how it was written.
  long long x = 0;
  values_[key] = o->type == OptionSpec::Int && parse_whole(value, &x) ? std::to_string(x) : value;
}

std::string Config::get(const std::string &key) const {
  const OptionSpec *o = find_option(key);
  if (!o) fail(Status::unknown_option, "unknown option '", one_line_text(key), "'; known options: ", option_keys_list());
  auto it = values_.find(key);
  return it != values_.end() ? it->second : std::string(o->default_value);
}

int64_t Config::get_int(const std::string &key) const { return std::strtoll(get(key).c_str(), nullptr, 10); }
double Config::get_double(const std::string &key) const { return std::strtod(get(key).c_str(), nullptr); }

}  // namespace ptdp
