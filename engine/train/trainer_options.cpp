// TrainerOptions from a Config: every field read, then the cross-checks that
// need several of them (layout, batch sizes, schedule, precision), each a
// clear invalid_config naming the fields.
#include "engine/train/trainer_options.h"

#include "checkpoints/sharded_checkpoint.h"
#include "engine/core/status.h"
#include "engine/data/blend.h"
#include "engine/data/sampler.h"
#include "engine/device/device.h"

namespace ptdp {

namespace {
constexpr int64_t kMaxRanks = 4096;  // keeps every rank count and index comfortably in an int
}  // namespace

TokenizerSpec TrainerOptions::tokenizer_spec() const {
  TokenizerSpec s;
  s.type = tokenizer;
  s.vocab_file = vocab_file;
  s.merge_file = merge_file;
  s.tokenizer_file = tokenizer_file;
  return s;
}

std::vector<std::string> idle_option_notes(const TrainerOptions &o) {
  const ParallelDims &L = o.parallel;
  std::vector<std::string> notes;
  auto idle = [&](bool when, const std::string &what, const std::string &why) {
    if (when) notes.push_back(what + " has no effect here: " + why);
  };
  idle(o.sequence_parallel && L.t == 1, "--sequence-parallel",
       "it splits the sequence over tensor-parallel ranks, and t = 1");
  idle(o.distributed_optimizer && L.d == 1, "--use-distributed-optimizer",
       "it shards the optimizer state over data-parallel ranks, and d = 1");
  idle(o.overlap_grad_reduce && L.d == 1, "--overlap-grad-reduce",
       "it overlaps the data-parallel gradient reduction, and d = 1 has none");
  // (Another than the default: the one a user gives.)
  idle(o.ddp_bucket_size != TrainerOptions{}.ddp_bucket_size && L.d == 1, "--ddp-bucket-size",
       "it sizes the data-parallel gradient reduction's buckets, and d = 1 has none");
  idle(!o.scatter_gather && (L.t == 1 || L.p == 1), "--no-scatter-gather-tensors-in-pipeline",
       "scatter/gather acts between pipeline stages (p > 1) of tensor-parallel ranks (t > 1)");
  idle(o.schedule == ScheduleKind::zbh1 && L.p == 1, "--pipeline-schedule zbh1",
       "it fills the pipeline's bubble with weight-gradient passes, and p = 1 has none");
  if (o.schedule == ScheduleKind::gpipe && L.p == 1)  // (not idle: it holds more)
    notes.push_back("--pipeline-schedule gpipe at p = 1 has no pipeline bubble to act on; it runs "
                    "all micro-batches' forwards before their backwards, holding every one's "
                    "activations (1f1b holds one's)");
  idle(o.recompute.selective && o.use_flash_attn, "--recompute-granularity selective",
       "flash attention keeps no [s, s] attention probabilities, which are what selective "
       "recomputation recomputes");
  return notes;
}

TrainerOptions TrainerOptions::from_config(const Config &c) {
  TrainerOptions o;
  // (Numbers as read, not as written: 1e-8 and 1e-08 are one value.)
  for (const OptionSpec &s : option_schema())
    o.config_values.emplace_back(s.key, s.type == OptionSpec::Int     ? std::to_string(c.get_int(s.key))
                                        : s.type == OptionSpec::Float ? number_text(c.get_double(s.key))
                                                                      : c.get(s.key));
  GptConfig &m = o.model;
  for (const GptConfigField &f : gpt_config_fields()) {
    if (f.kind == GptConfigField::Int)
      m.*f.int_member = (int)c.get_int(f.name);
    else if (f.kind == GptConfigField::Choice)
      m.*f.int_member = f.choice_index(c.get(f.name));  // the schema checked the name
    else
      m.*f.float_member = (float)c.get_double(f.name);
  }
  o.tokenizer = c.get("tokenizer_type");
  o.vocab_file = c.get("vocab_file");
  o.merge_file = c.get("merge_file");
  o.tokenizer_file = c.get("tokenizer_file");
  const int tokenizer_vocab = make_tokenizer(o.tokenizer_spec())->vocab_size();
  if (m.vocab_size == 0) m.vocab_size = tokenizer_vocab;
  o.data_path = c.get("data_path");
  // Its form (a path, or WEIGHT PATH pairs with finite weights >= 0 of a
  // positive sum) is an option's, checked with the others: ptdp_config_check
  // passed '-1 A' that the trainer then refused.
  if (!o.data_path.empty()) parse_data_path(o.data_path);
  // A dataset holds the tokenizer's ids: the model must have a row for each.
  // (Without one, e.g. a model imported to be read, any vocabulary goes: the
  // forward refuses an id outside it.)
  if (m.vocab_size < tokenizer_vocab && !o.data_path.empty())
    fail(Status::invalid_config, "vocab_size (", m.vocab_size, ") is smaller than the '",
         o.tokenizer, "' tokenizer's vocabulary (", tokenizer_vocab, "), whose ids data_path holds");
  o.parallel.t = (int)c.get_int("tensor_model_parallel_size");
  o.parallel.p = (int)c.get_int("pipeline_model_parallel_size");
  o.parallel.d = (int)c.get_int("data_parallel_size");
  o.micro_batch_size = (int)c.get_int("micro_batch_size");
  o.global_batch_size = (int)c.get_int("global_batch_size");
  o.train_iters = c.get_int("train_iters");
  o.seed = (uint64_t)c.get_int("seed");
  o.lr.max_lr = c.get_double("lr");
  o.lr.min_lr = c.get_double("min_lr");
  o.lr.warmup_iters = c.get_int("lr_warmup_iters");
  o.lr.decay_iters = c.get_int("lr_decay_iters");
  if (o.lr.decay_iters == 0) o.lr.decay_iters = o.train_iters;
  o.lr.style = c.get("lr_decay_style");
  o.adam.weight_decay = c.get_double("weight_decay");
  o.adam.beta1 = c.get_double("adam_beta1");
  o.adam.beta2 = c.get_double("adam_beta2");
  o.adam.eps = c.get_double("adam_eps");
  o.clip_grad = c.get_double("clip_grad");
  o.split = c.get("split");
  o.eval_iters = (int)c.get_int("eval_iters");
  o.num_threads = (int)c.get_int("num_threads");
  o.device = c.get("device");
  cuda_ordinal(o.device);  // the name checked now, before any file is read
  o.distributed_backend = c.get("distributed_backend");
  o.use_flash_attn = c.get_int("use_flash_attn") != 0;
  o.ddp_bucket_size = c.get_int("ddp_bucket_size");
  o.overlap_grad_reduce = c.get_int("overlap_grad_reduce") != 0;
  o.distributed_optimizer = c.get_int("use_distributed_optimizer") != 0;
  if (o.distributed_optimizer && o.overlap_grad_reduce)
    fail(Status::invalid_config, "use_distributed_optimizer reduce-scatters the gradients after "
         "the backward; overlap_grad_reduce with it is not supported yet: set one of them to 0");
  o.comm_timeout_s = c.get_double("comm_timeout");
  o.scatter_gather = c.get_int("scatter_gather_tensors_in_pipeline") != 0;
  o.sequence_parallel = c.get_int("sequence_parallel") != 0;
  o.timeline_path = c.get("timeline");
  o.op_profile_path = c.get("profile_ops");
  o.save_path = c.get("save");
  o.load_path = c.get("load");
  o.save_interval = c.get_int("save_interval");
  o.keep_last_checkpoints = (int)c.get_int("keep_last_checkpoints");
  o.async_save = c.get_int("async_save") != 0;
  o.verify_checkpoint = c.get_int("verify_checkpoint") != 0;
  o.exit_signal_handler = c.get_int("exit_signal_handler") != 0;
  o.exit_interval = c.get_int("exit_interval");
  o.exit_duration_mins = c.get_double("exit_duration_in_mins");
  o.override_opt_param_scheduler = c.get_int("override_opt_param_scheduler") != 0;
  o.finetune = c.get_int("finetune") != 0;
  if (o.finetune && o.load_path.empty())
    fail(Status::invalid_config,
         "finetune is set but load is not: give the checkpoint whose weights to fine-tune");
  // Options that act only on the saves a run makes into `save` (the API's
  // saves are synchronous and take their own directory): without it they
  // would be ignored.
  if (o.save_path.empty() && (o.save_interval > 0 || o.async_save))
    fail(Status::invalid_config, o.save_interval > 0 ? "save_interval" : "async_save",
         " is set but save is not: it acts on the saves a run makes into its save directory; "
         "give save, or leave it out");
  const bool bf16 = c.get_int("bf16") != 0, fp16 = c.get_int("fp16") != 0;
  if (bf16 && fp16)
    fail(Status::invalid_config,
         "bf16 and fp16 are both set; choose one 16-bit type (or neither for fp32)");
  o.precision.dtype = bf16 ? DType::bf16 : fp16 ? DType::f16 : DType::f32;
  o.precision.grads_in_fp32 = c.get_int("accumulate_allreduce_grads_in_fp32") != 0;
  LossScalerConfig &ls = o.loss_scaler;
  ls.initial_scale = c.get_double("initial_loss_scale");
  ls.min_scale = c.get_double("min_loss_scale");
  ls.window = c.get_int("loss_scale_window");
  ls.hysteresis = c.get_int("hysteresis");
  ls.dynamic = !c.is_set("loss_scale");
  ls.static_scale = c.get_double("loss_scale");
  // As Megatron: a static --loss-scale for either 16-bit type, else dynamic
  // scaling for fp16 and none for bf16 (its range is fp32's).
  o.use_loss_scaler = fp16 || (bf16 && !ls.dynamic);
  if (!bf16 && !fp16) {
    for (const char *k :
         {"loss_scale", "initial_loss_scale", "min_loss_scale", "loss_scale_window", "hysteresis"})
      if (c.is_set(k))
        fail(Status::invalid_config, k,
             " is set but the run is fp32: loss scaling needs fp16 (or bf16 with a static "
             "loss_scale)");
    if (c.is_set("accumulate_allreduce_grads_in_fp32") && !o.precision.grads_in_fp32)
      fail(Status::invalid_config,
           "accumulate_allreduce_grads_in_fp32 = 0 needs bf16 or fp16: an fp32 run's gradients are "
           "fp32");
  }
  // The dynamic scale's options act only where the scale is dynamic: fp16
  // without a static loss_scale (bf16 has none: its range is fp32's).
  if ((bf16 || fp16) && !(fp16 && ls.dynamic))
    for (const char *k : {"initial_loss_scale", "min_loss_scale", "loss_scale_window", "hysteresis"})
      if (c.is_set(k))
        fail(Status::invalid_config, k, " is set but the run has no dynamic loss scale (",
             fp16 ? "fp16 with a static loss_scale" : "bf16", "): it acts only for fp16 without loss_scale",
             fp16 ? "; leave out loss_scale for a dynamic scale" : "");
  if (ls.min_scale > ls.initial_scale && ls.dynamic && fp16)
    fail(Status::invalid_config, "min_loss_scale (", ls.min_scale, ") exceeds initial_loss_scale (",
         ls.initial_scale, ")");

  const int64_t world = (int64_t)o.parallel.t * o.parallel.p * o.parallel.d;
  if (world > kMaxRanks)
    fail(Status::invalid_config, "t*p*d = ", o.parallel.t, "*", o.parallel.p, "*", o.parallel.d,
         " = ", world, " ranks; at most ", kMaxRanks, " are supported");
  m.validate(o.parallel.t);
  parse_split(o.split, 1);  // its form, before any dataset is opened
  // Pipeline: p stages of v model chunks each (ARCHITECTURE §4).
  const int p = o.parallel.p;
  const int64_t per_chunk = c.get_int("num_layers_per_virtual_pipeline_stage");
  if (per_chunk > 0) {
    if (m.num_layers % (p * per_chunk) != 0)
      fail(Status::invalid_config, "num_layers (", m.num_layers,
           ") must be divisible by pipeline_model_parallel_size x "
           "num_layers_per_virtual_pipeline_stage (",
           p, " x ", per_chunk, " = ", p * per_chunk, ")");
    o.virtual_stages = (int)(m.num_layers / (p * per_chunk));
  }
  m.validate_pipeline(p, o.virtual_stages);
  const int64_t bd = (int64_t)o.micro_batch_size * o.parallel.d;
  if (o.global_batch_size % bd != 0)
    fail(Status::invalid_config, "global_batch_size (", o.global_batch_size,
         ") must be divisible by micro_batch_size x data_parallel_size (", o.micro_batch_size,
         " x ", o.parallel.d, " = ", bd, ")");
  const std::string schedule = c.get("pipeline_schedule");
  if (schedule == "auto")
    o.schedule = o.virtual_stages > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b;
  else
    o.schedule = parse_schedule(schedule);
  if (o.sequence_parallel && o.parallel.t > 1 && m.seq_length % o.parallel.t != 0)
    fail(Status::invalid_config, "sequence_parallel splits the ", m.seq_length,
         " positions of a sequence over the tensor ranks: seq_length must be a multiple of "
         "tensor_model_parallel_size (", o.parallel.t, ")");
  validate_schedule(o.schedule, p, o.virtual_stages, o.microbatches());
  const std::string granularity = c.get("recompute_granularity");
  o.recompute.enabled = granularity == "full";
  o.recompute.selective = granularity == "selective";
  o.recompute.method =
      c.get("recompute_method") == "block" ? RecomputeMethod::block : RecomputeMethod::uniform;
  o.recompute.num_layers = (int)c.get_int("recompute_num_layers");
  // Which layers full recomputation takes (Megatron's rule): given without
  // it, they would be ignored in silence.
  for (const char *key : {"recompute_method", "recompute_num_layers"})
    if (c.is_set(key) && !o.recompute.enabled)
      fail(Status::invalid_config, key, " chooses the layers of full recomputation, but ",
           "recompute_granularity is '", granularity.empty() ? "none" : granularity,
           "': give recompute_granularity full, or leave ", key, " out");
  const int layers_per_chunk = m.num_layers / (p * o.virtual_stages);
  if (o.recompute.enabled && o.recompute.num_layers > layers_per_chunk)
    fail(Status::invalid_config, "recompute_num_layers (", o.recompute.num_layers,
         ") exceeds the layers per model chunk (", layers_per_chunk,
         " = num_layers / (p x v) = ", m.num_layers, " / (", p, " x ", o.virtual_stages, "))");
  if (o.lr.min_lr > o.lr.max_lr)
    fail(Status::invalid_config, "min_lr (", o.lr.min_lr, ") must not exceed lr (", o.lr.max_lr,
         ")");
  if (o.lr.style != "constant" && o.lr.decay_iters <= o.lr.warmup_iters && o.train_iters > 0)
    fail(Status::invalid_config, "lr_decay_iters (", o.lr.decay_iters,
         ", 0 = train_iters) must exceed lr_warmup_iters (", o.lr.warmup_iters, ")");
  // A constant rate is reached after the warm-up: one the run outlasts never
  // trains at lr (the decaying styles' check above is the same rule).
  if (o.lr.style == "constant" && o.lr.warmup_iters > 0 && o.train_iters > 0 &&
      o.train_iters <= o.lr.warmup_iters)
    fail(Status::invalid_config, "train_iters (", o.train_iters, ") must exceed lr_warmup_iters (",
         o.lr.warmup_iters, ") with a constant learning rate: the run would end before it reaches lr");
  return o;
}

void TrainerOptions::model_from_checkpoint(Config &c, const std::string &dir) {
  const GptConfig m = checkpoint_model(dir);
  for (const GptConfigField &f : gpt_config_fields()) {
    if (f.kind == GptConfigField::Int)
      c.set(f.name, std::to_string(f.int_value(m)));
    else if (f.kind == GptConfigField::Choice)
      c.set(f.name, f.choice_name(m.*f.int_member));
    else
      c.set(f.name, number_text(f.float_value(m)));
  }
}

}  // namespace ptdp
