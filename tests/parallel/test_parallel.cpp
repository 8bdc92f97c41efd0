// Tensor and data parallelism on thread ranks against the serial run
// (ARCHITECTURE §3): same losses, same parameters, and exactly the
// communication the Megatron split prescribes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

#include "engine/comm/grid.h"
#include "engine/comm/nccl_comm.h"
#include "engine/comm/thread_comm.h"
#include "engine/core/status.h"
#include "engine/data/corpus.h"
#include "engine/train/trainer.h"
#include "tests/support/config_options.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tiny_dataset.h"
#include "tests/support/tiny_model.h"
#include "tests/support/trained_run.h"

using namespace ptdp;

namespace {

// 12 heads: divisible by t = 1, 2, 3, 4, 6.
GptConfig small_model() { return tiny_gpt(2, 48, 12, 50, 6); }

// Runs fn(rank) on t threads.
template <class F>
void on_threads(int t, F fn) {
  std::vector<std::thread> th;
  for (int r = 0; r < t; r++) th.emplace_back(fn, r);
  for (auto &x : th) x.join();
}

}  // namespace

namespace {

// The LLaMA family's block: 12 query heads over `groups` key/value heads.
GptConfig small_llama(int groups) { return with_llama_block(small_model(), 500000.f, groups, 36); }

// One forward and backward of the model split over t tensor ranks, in double:
// the loss and every gradient equal the serial ones up to summation order.
void expect_tensor_parallel_matches_serial(const GptConfig &cfg, std::vector<int> ts) {
  const int s = cfg.seq_length, b = 3, N = s * b;
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; i++) {
    tokens[i] = (i * 7 + 3) % cfg.vocab_size;
    targets[i] = (i * 11 + 5) % cfg.vocab_size;
  }
  const StepContext ctx{true, 3, 40};
  GPT<double> serial(cfg, 5);
  const double serial_loss = serial.forward(tokens.data(), targets.data(), s, b, ctx);
  serial.backward(1.0 / N);

  for (int t : ts) {
    ThreadWorld world(t, 30);
    RankGrid grid({t, 1, 1});
    std::vector<std::unique_ptr<Communicator>> comms;
    for (int r = 0; r < t; r++) comms.push_back(world.group("tp", grid.tp_group(r), r));
    std::vector<std::unique_ptr<GPT<double>>> shards(t);
    std::vector<double> losses(t);
    std::vector<CommStats> after_forward(t);
    on_threads(t, [&](int r) {
      shards[r] = std::make_unique<GPT<double>>(cfg, 5, TensorParallel{r, t, comms[r].get()});
      losses[r] = shards[r]->forward(tokens.data(), targets.data(), s, b, ctx);
      after_forward[r] = comms[r]->stats();
      shards[r]->backward(1.0 / N);
    });
    for (int r = 0; r < t; r++)
      EXPECT_NEAR(losses[r], serial_loss, 1e-12 * serial_loss) << "t=" << t << " rank " << r;

    // Assemble every gradient from the shards and compare with the serial one.
    for (const ParamInfo &sp : serial.param_table()) {
      std::vector<double> whole(sp.numel, 0.0);
      for (int r = 0; r < t; r++) {
        const ParamInfo &p = shards[r]->param(sp.name);
        if (p.split_axis < 0 && r > 0) {  // replicated: every rank holds the same gradient
          for (size_t i = 0; i < p.numel; i++)
            ASSERT_EQ(shards[r]->grads()[p.offset + i], shards[0]->grads()[p.offset + i]) << sp.name;
          continue;
        }
        for (size_t i = 0; i < p.numel; i++) {
          int64_t g = shards[r]->global_index(p, i);
          if ((size_t)g < whole.size()) whole[(size_t)g] = shards[r]->grads()[p.offset + i];
        }
      }
      double scale = 1e-30, diff = 0;
      for (size_t i = 0; i < sp.numel; i++) {
        scale = std::max(scale, std::abs(serial.grads()[sp.offset + i]));
        diff = std::max(diff, std::abs(serial.grads()[sp.offset + i] - whole[i]));
      }
      // Double precision, sums split over t partial products: ~1e-15 relative.
      EXPECT_LT(diff / scale, 1e-11) << "t=" << t << " " << sp.name;
    }

    // Communication per micro-batch (ARCHITECTURE §4): forward = 2 all-reduces of
    // b*s*h per layer + the embedding's, plus the loss's max and sums; backward =
    // 2 per layer + the LM head input's.
    const int64_t L = cfg.num_layers, bsh = (int64_t)N * cfg.hidden_size;
    const CommStats &f = after_forward[0], &all = comms[0]->stats();
    const int ar = (int)CommOp::all_reduce;
    EXPECT_EQ(f.calls[ar], 2 * L + 1 + 2);
    EXPECT_EQ(f.bytes[ar], (int64_t)sizeof(double) * ((2 * L + 1) * bsh + N + 2 * N));
    EXPECT_EQ(all.calls[ar] - f.calls[ar], 2 * L + 1);
    EXPECT_EQ(all.bytes[ar] - f.bytes[ar], (int64_t)sizeof(double) * (2 * L + 1) * bsh);
  }
}

}  // namespace

TEST(TensorParallel, ModelMatchesSerialInDouble) {
  expect_tensor_parallel_matches_serial(small_model(), {2, 3, 4});
}

// Query groups shard over the tensor ranks, down to one group a rank (t = G).
TEST(TensorParallel, LlamaModelMatchesSerialInDouble) {
  expect_tensor_parallel_matches_serial(small_llama(6), {2, 3, 6});
  expect_tensor_parallel_matches_serial(small_llama(2), {2});
  GptConfig biased = small_llama(6);  // every linear bias: SwiGLU's [gate; up] split along f
  biased.disable_bias_linear = 0;
  expect_tensor_parallel_matches_serial(biased, {2, 3});
  try {
    GPT<double> m(small_llama(2), 5, TensorParallel{0, 4, nullptr});
    FAIL() << "4 tensor ranks over 2 query groups accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("must divide num_query_groups (2)"), std::string::npos)
        << e.what();
  }
}

namespace {

TrainerOptions run_options(int t, int d, int p = 1) {
  Config c;
  set_options(c, {{"num_layers", "2"}, {"hidden_size", "48"}, {"num_attention_heads", "12"},
                  {"seq_length", "16"}, {"micro_batch_size", "2"}, {"global_batch_size", "8"},
                  {"train_iters", "10"}, {"lr", "3e-3"}, {"min_lr", "3e-4"},
                  {"lr_warmup_iters", "2"}, {"hidden_dropout", "0.1"}, {"attention_dropout", "0.1"},
                  {"split", "80,20"}, {"data_path", tiny_dataset_path()},
                  {"tensor_model_parallel_size", std::to_string(t)},
                  {"data_parallel_size", std::to_string(d)},
                  {"pipeline_model_parallel_size", std::to_string(p)}});
  c.set("ddp_bucket_size", "5000");  // several buckets
  return TrainerOptions::from_config(c);
}

TrainedRun train(int t, int d) { return train_run(run_options(t, d), 10); }

}  // namespace

class Equivalence : public ::testing::TestWithParam<std::pair<int, int>> {};

// 10 training steps with dropout at (t, d) give the serial losses and parameters.
TEST_P(Equivalence, TenStepsMatchSerial) {
  static const TrainedRun serial = train(1, 1);
  auto [t, d] = GetParam();
  expect_matches_serial(train(t, d), serial);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Equivalence,
                         ::testing::Values(std::make_pair(2, 1), std::make_pair(4, 1),
                                           std::make_pair(1, 2), std::make_pair(1, 4),
                                           std::make_pair(2, 2), std::make_pair(3, 1)),
                         [](const auto &info) {
                           return "t" + std::to_string(info.param.first) + "d" +
                                  std::to_string(info.param.second);
                         });

// As a rank on a GPU runs with the threads backend: every communicator the
// model, the pipeline and the gradient reductions use copies device buffers
// through the host (StagedComm; here the device is the CPU).
TEST(Parallel, CommunicatorsStagedThroughHostMatchSerial) {
  TrainerOptions o = run_options(2, 2, 2);
  o.stage_comm_through_host = true;
  expect_matches_serial(train_run(o, 10), train(1, 1));
}

// Fused attention numbers its heads globally (head_offset) and keys dropout as
// the unfused path does: (t, p, d) = (2, 2, 2) reproduces its serial run.
TEST(Parallel, FlashAttentionMatchesSerial) {
  TrainerOptions serial = run_options(1, 1), o = run_options(2, 2, 2);
  serial.use_flash_attn = o.use_flash_attn = true;
  expect_matches_serial(train_run(o, 10), train_run(serial, 10));
}


// The LLaMA family's block trains the same at (t, p, d) = (2, 2, 2) as serially
// (t = G = 2: one query group a tensor rank), unfused and fused (flash) attention.
TEST(Parallel, LlamaBlockMatchesSerial) {
  auto llama = [](TrainerOptions o, bool flash) {
    o.model.normalization = GptConfig::RMSNorm;
    o.model.position_embedding_type = GptConfig::Rope;
    o.model.num_query_groups = 2;
    o.model.swiglu = 1;
    o.model.ffn_hidden_size = 96;
    o.model.untie_embeddings_and_output_weights = 1;
    o.model.disable_bias_linear = 1;
    o.model.add_qkv_bias = 1;
    o.use_flash_attn = flash;
    return o;
  };
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "flash attention" : "unfused attention");
    expect_matches_serial(train_run(llama(run_options(2, 2, 2), flash), 10),
                          train_run(llama(run_options(1, 1), flash), 10));
  }
}

TEST(DataParallel, OneGradientReductionPerIteration) {
  Trainer tr(run_options(2, 2));
  tr.step();
  const CommStats &dp = tr.comm_stats(0, "dp");
  const size_t n = tr.model(0).num_params();
  const int ar = (int)CommOp::all_reduce;
  // The gradients once plus the loss (one double): buckets of 5000 below the
  // tied embedding and above it, and the embedding's own.
  EXPECT_EQ(dp.bytes[ar], (int64_t)(n * sizeof(float) + sizeof(double)));
  const ParamInfo &wte = tr.model(0).param("wte.weight");
  const size_t wte_end = wte.padded_end();
  auto buckets = [](size_t elements) { return (int64_t)((elements + 4999) / 5000); };
  EXPECT_EQ(dp.calls[ar],
            buckets(wte.offset) + buckets(wte_end - wte.offset) + buckets(n - wte_end) + 1);
  EXPECT_EQ(tr.rank_report(0).grad_buckets, buckets(wte.offset) + buckets(n - wte_end));
  EXPECT_EQ(tr.rank_report(0).overlapped_grad_buckets, 0);
}

// --overlap-grad-reduce reduces each bucket on a communication thread as soon
// as the backward has finished it. A sum does not depend on when it is taken
// or where buckets start, so the run is bit-identical to the one without
// overlap: losses, every parameter, and the traffic. Layouts: plain data
// parallel; every kind of parallelism with the interleaved schedule (chunks
// finish at different times); recomputation (layers finish in another order);
// 16-bit gradients (rounded per range as the backward finishes it).
TEST(DataParallel, OverlappedGradReduceIsBitIdentical) {
  struct Case {
    const char *name;
    int t, d, p;
    std::function<void(TrainerOptions &)> more;
  };
  const std::vector<Case> cases = {
      {"d2", 1, 2, 1, [](TrainerOptions &) {}},
      {"d2 h44 (tensors padded to 16 elements)", 1, 2, 1,
       [](TrainerOptions &o) {
         o.model.hidden_size = 44;
         o.model.num_attention_heads = 4;
       }},
      {"t2d2p2v2", 2, 2, 2,
       [](TrainerOptions &o) {
         o.model.num_layers = 4;
         o.virtual_stages = 2;
         o.schedule = ScheduleKind::interleaved;
       }},
      {"d4 recompute", 1, 4, 1,
       [](TrainerOptions &o) {
         o.model.num_layers = 4;
         o.recompute.enabled = true;
         o.recompute.num_layers = 2;
       }},
      {"d2p2 bf16 grads", 1, 2, 2,
       [](TrainerOptions &o) {
         o.precision.dtype = DType::bf16;
         o.precision.grads_in_fp32 = false;
       }},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    TrainerOptions plain = run_options(c.t, c.d, c.p);
    c.more(plain);
    TrainerOptions overlapped = plain;
    overlapped.overlap_grad_reduce = true;
    // The communication thread adds its spans to the rank's timeline too.
    TempDir dir("ptdp_overlap");
    overlapped.timeline_path = dir.path + "/trace.json";
    Trainer a(plain), b(overlapped);
    for (int i = 0; i < 3; i++) {
      const StepMetrics ma = a.step(), mb = b.step();
      EXPECT_EQ(ma.lm_loss, mb.lm_loss) << "step " << i;
      EXPECT_EQ(ma.grad_norm, mb.grad_norm) << "step " << i;
    }
    for (int r = 0; r < a.world_size(); r++) {
      SCOPED_TRACE("rank " + std::to_string(r));
      // Every bucket went while the backward ran.
      const Trainer::RankReport &rb = b.rank_report(r);
      EXPECT_GT(rb.grad_buckets, 1);
      EXPECT_EQ(rb.overlapped_grad_buckets, rb.grad_buckets);
      EXPECT_NE(read_file(overlapped.timeline_path).find("\"group\":\"dp\""), std::string::npos);
      EXPECT_EQ(a.model(r).params_to_host(), b.model(r).params_to_host());
      const CommStats &da = a.comm_stats(r, "dp"), &db = b.comm_stats(r, "dp");
      for (int op = 0; op < (int)CommOp::count; op++) {
        EXPECT_EQ(da.calls[op], db.calls[op]);
        EXPECT_EQ(da.bytes[op], db.bytes[op]);
      }
    }
  }
}

// NCCL needs GPUs: asked for on CPU ranks it is a clear error, in the
// trainer's options and in the communicator itself.
TEST(Parallel, NcclOnTheCpuIsAClearError) {
  TrainerOptions o = run_options(1, 2);
  o.distributed_backend = "nccl";
  expect_error([&] { Trainer tr(o); }, Status::invalid_config,
               "--distributed-backend nccl needs the ranks on GPUs");
  ThreadWorld host(1, 10);
  auto cpu = make_cpu_device();
  if (nccl_built())
    expect_error([&] { make_nccl_comm(host.group("tp", {0}, 0), *cpu, 10); },
                 Status::invalid_config, "needs every rank on a CUDA device");
  else
    expect_error([&] { make_nccl_comm(host.group("tp", {0}, 0), *cpu, 10); },
                 Status::invalid_config, "has no NCCL");
}

TEST(Parallel, BadLayoutsAreClearErrors) {
  Config c;
  set_options(c, {{"data_path", "unused"}, {"num_attention_heads", "4"},
                  {"tensor_model_parallel_size", "3"}});
  expect_error([&] { TrainerOptions::from_config(c); }, Status::invalid_config,
               "tensor_model_parallel_size (3) must divide num_attention_heads (4)");
  set_options(c, {{"num_attention_heads", "6"}, {"hidden_size", "96"}, {"ffn_hidden_size", "100"}});
  expect_error([&] { TrainerOptions::from_config(c); }, Status::invalid_config,
               "must divide ffn_hidden_size (100)");
  set_options(c, {{"ffn_hidden_size", "0"}, {"tensor_model_parallel_size", "1"},
                  {"data_parallel_size", "3"}, {"micro_batch_size", "2"},
                  {"global_batch_size", "8"}});
  expect_error([&] { TrainerOptions::from_config(c); }, Status::invalid_config,
               "must be divisible by micro_batch_size x data_parallel_size (2 x 3 = 6)");
}

